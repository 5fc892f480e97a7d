"""A minimal safetensors writer for the CLI tests (f32 tensors only)."""
import array
import json
import struct


def st(path, tensors):
    """Write [(name, shape, values)] as f32 tensors, back to back, to path."""
    header, offset, blobs = {}, 0, []
    for name, shape, values in tensors:
        blob = array.array("f", values).tobytes()
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
