#!/usr/bin/env python3
"""Writes a small copy of a GGUF file for a fuzz seed corpus: every metadata key kept, each array
cut to its first N elements (the vocabulary too, so the tokenizer still loads), the tensors left
out (general.alignment kept). Usage: shrink_gguf.py IN.gguf OUT.gguf [N=96]"""
import struct
import sys

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        value = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return value[0]

    def string(self):
        n = self.take("Q")
        text = self.data[self.at:self.at + n]
        self.at += n
        return text


def write_string(out, text):
    out += struct.pack("<Q", len(text)) + text


def copy_value(reader, out, kind, keep):
    if kind == 8:
        write_string(out, reader.string())
    elif kind == 9:
        elem, count = reader.take("I"), reader.take("Q")
        kept = min(count, keep)
        out += struct.pack("<IQ", elem, kept)
        for i in range(count):
            piece = bytearray()
            copy_value(reader, piece, elem, keep)
            if i < kept:
                out += piece
    else:
        fmt = SCALARS[kind]
        out += struct.pack("<" + fmt, reader.take(fmt))


def main():
    data = open(sys.argv[1], "rb").read()
    keep = int(sys.argv[3]) if len(sys.argv) > 3 else 96
    reader = Reader(data)
    magic, version = reader.take("I"), reader.take("I")
    _, n_kv = reader.take("Q"), reader.take("Q")
    out = bytearray(struct.pack("<IIQQ", magic, version, 0, n_kv))
    for _ in range(n_kv):
        write_string(out, reader.string())
        kind = reader.take("I")
        out += struct.pack("<I", kind)
        copy_value(reader, out, kind, keep)
    open(sys.argv[2], "wb").write(out)


main()
