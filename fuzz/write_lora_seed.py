#!/usr/bin/env python3
"""Writes a small LoRA adapter for the story model in llama.cpp's GGUF layout, as a seed of the
fuzz_lora_adapter corpus: general.type "adapter", adapter.type "lora", adapter.lora.alpha, and
per target "<tensor>.lora_a" [n_in, rank] and ".lora_b" [rank, n_out] with seeded random values.
Usage: write_lora_seed.py OUT.gguf ALPHA DTYPE TARGET:N_IN:N_OUT:RANK...  (DTYPE f32 or f16)"""
import random
import struct
import sys

ALIGNMENT = 32
GGML_TYPES = {"f32": (0, "f", 4), "f16": (1, "e", 2)}


def string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def main():
    out_path, alpha, dtype = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    ggml_type, fmt, size = GGML_TYPES[dtype]
    rng = random.Random(7)
    tensors = []  # (name, dims, bytes)
    for spec in sys.argv[4:]:
        target, n_in, n_out, rank = spec.split(":")
        n_in, n_out, rank = int(n_in), int(n_out), int(rank)
        for suffix, dims in ((".lora_a", (n_in, rank)), (".lora_b", (rank, n_out))):
            count = dims[0] * dims[1]
            values = [rng.gauss(0.0, 0.3) for _ in range(count)]
            tensors.append((target + suffix, dims, struct.pack("<%d%s" % (count, fmt), *values)))
    metadata = [("general.architecture", 8, string("llama")),
                ("general.type", 8, string("adapter")),
                ("adapter.type", 8, string("lora")),
                ("adapter.lora.alpha", 6, struct.pack("<f", alpha))]
    out = bytearray(struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(metadata)))
    for key, kind, value in metadata:
        out += string(key) + struct.pack("<I", kind) + value
    offset = 0
    for name, dims, data in tensors:
        out += string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    out += b"\0" * (-len(out) % ALIGNMENT)
    for _, _, data in tensors:
        out += data + b"\0" * (-len(data) % ALIGNMENT)
    open(out_path, "wb").write(out)


if __name__ == "__main__":
    main()
