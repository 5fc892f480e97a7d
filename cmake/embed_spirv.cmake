# Writes the SPIR-V file SPV as a C array br_vk_spv_NAME (4-byte aligned, as
# vkCreateShaderModule reads it) and its size br_vk_spv_NAME_size into OUT.
# cmake -DSPV=x.spv -DNAME=x -DOUT=x.spv.c -P embed_spirv.cmake
file(READ "${SPV}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* generated from ${NAME}.comp by cmake/embed_spirv.cmake */\n"
     "#include <stddef.h>\n"
     "_Alignas(4) const unsigned char br_vk_spv_${NAME}[${nbytes}] = {\n${body}\n};\n"
     "const size_t br_vk_spv_${NAME}_size = ${nbytes};\n")
