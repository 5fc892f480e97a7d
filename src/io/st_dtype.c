/* The element types of safetensors: names as files spell them, and their widths. */
#include <string.h>

#include "io/io_internal.h"

static const struct {
    br_st_dtype dtype;
    const char *name;
    size_t bits;
} dtypes[] = {
    {BR_ST_BOOL, "BOOL", 8},       {BR_ST_U8, "U8", 8},           {BR_ST_I8, "I8", 8},
    {BR_ST_F8_E5M2, "F8_E5M2", 8}, {BR_ST_F8_E4M3, "F8_E4M3", 8}, {BR_ST_F8_E8M0, "F8_E8M0", 8},
    {BR_ST_I16, "I16", 16},        {BR_ST_U16, "U16", 16},        {BR_ST_F16, "F16", 16},
    {BR_ST_BF16, "BF16", 16},      {BR_ST_I32, "I32", 32},        {BR_ST_U32, "U32", 32},
    {BR_ST_F32, "F32", 32},        {BR_ST_I64, "I64", 64},        {BR_ST_U64, "U64", 64},
    {BR_ST_F64, "F64", 64},        {BR_ST_C64, "C64", 64},        {BR_ST_F4, "F4", 4},
    {BR_ST_F6_E2M3, "F6_E2M3", 6}, {BR_ST_F6_E3M2, "F6_E3M2", 6},
};

const char *br_st_dtype_name(br_st_dtype dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == dtype) return dtypes[i].name;
    return "unknown";
}

size_t br_st_dtype_bits(br_st_dtype dtype) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].dtype == dtype) return dtypes[i].bits;
    return 0;
}

br_st_dtype br_st_dtype_from_name(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0) return dtypes[i].dtype;
    return BR_ST_UNKNOWN;
}
