#!/usr/bin/env python3
"""Writes a small copy of a KL-divergence base file (`petrel perplexity --kl-divergence-base`)
for the fuzz_kld_base seed corpus: the first window only, and each position's row cut to its first
N codes (tokens and argmax folded into them), the header changed to match. The reader checks the layout, not
the vocabulary hash, so the copy reads as a base file of an N-token vocabulary.
Usage: shrink_kld_base.py IN OUT [N=16]"""
import struct
import sys


def main():
    data = open(sys.argv[1], "rb").read()
    keep = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    magic, version, n_vocab, n_ctx, n_chunks, vocab_hash, reserved = struct.unpack_from(
        "<8sIIIIQQ", data, 0)
    at = 40 + 4 * n_ctx * n_chunks
    tokens = b"".join(struct.pack("<i", t % keep)
                      for t in struct.unpack_from("<%di" % n_ctx, data, 40))
    out = bytearray(struct.pack("<8sIIIIQQ", magic, version, keep, n_ctx, 1, vocab_hash, reserved))
    out += tokens
    record_bytes = 12 + 2 * n_vocab
    for _ in range(n_ctx - 1 - n_ctx // 2):  # the scored positions of one window (ChunkPlan)
        target, argmax, low = struct.unpack_from("<fif", data, at)
        out += struct.pack("<fif", target, argmax % keep, low) + data[at + 12:at + 12 + 2 * keep]
        at += record_bytes
    open(sys.argv[2], "wb").write(out)


if __name__ == "__main__":
    main()
