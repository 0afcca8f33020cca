"""Writes a random rank-4 LoRA adapter of the story model (2 blocks, dim 128, 4 KV heads of
16, FFN 384) in llama.cpp's GGUF layout, with the standard library only: the adapter the LoRA
check of test_capi.py loads through the C API and `petrel run --lora`."""
import random
import struct

_ALIGNMENT = 32
_GGUF_F32 = 0
_TYPE_UINT32, _TYPE_FLOAT32, _TYPE_STRING = 4, 6, 8


def _string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_story_adapter(path, seed=5):
    rank = 4
    targets = [("attn_q", 128, 128), ("attn_v", 128, 64), ("ffn_down", 384, 128)]
    rng = random.Random(seed)
    tensors = []  # (name, dims in GGUF order, float values)
    for block in range(2):
        for name, n_in, n_out in targets:
            stem = f"blk.{block}.{name}.weight"
            for suffix, dims in ((".lora_a", (n_in, rank)), (".lora_b", (rank, n_out))):
                values = [rng.gauss(0.0, 0.3) for _ in range(dims[0] * dims[1])]
                tensors.append((stem + suffix, dims, values))
    metadata = [("general.architecture", _TYPE_STRING, _string("llama")),
                ("general.type", _TYPE_STRING, _string("adapter")),
                ("adapter.type", _TYPE_STRING, _string("lora")),
                ("adapter.lora.alpha", _TYPE_FLOAT32, struct.pack("<f", 8.0)),
                ("general.alignment", _TYPE_UINT32, struct.pack("<I", _ALIGNMENT))]
    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        header += _string(key) + struct.pack("<I", kind) + value
    offset = 0
    data = b""
    for name, dims, values in tensors:
        header += _string(name) + struct.pack("<I", len(dims))
        header += b"".join(struct.pack("<Q", d) for d in dims)
        header += struct.pack("<IQ", _GGUF_F32, offset)
        blob = struct.pack(f"<{len(values)}f", *values)
        blob += b"\0" * (-len(blob) % _ALIGNMENT)
        data += blob
        offset += len(blob)
    header += b"\0" * (-len(header) % _ALIGNMENT)
    with open(path, "wb") as out:
        out.write(header + data)
