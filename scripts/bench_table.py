#!/usr/bin/env python3
"""Prints `petrel bench --json` lines of the BASELINES.md files as a table against llama.cpp.

Fractions: generation against the read roof measured after each run, prompts against the f32
FMA or int8 dot roof measured after each run (2 x layer weight elements x tokens/s); llama.cpp's
fractions are its BASELINES.md figures against that machine's roofs (270 GOP/s int8, 199
GFLOP/s f32) and its "share of the bandwidth bound".
"""
import json
import os
import sys

# llama.cpp on the baseline machine (../shared/BASELINES.md): t/s, and tg64's bandwidth share.
LLAMA = {
    "small-f16": (820, 688, 107.6, 0.67), "small-q8_0": (630, 617, 165.8, 0.55),
    "small-q4_0": (724, 670, 228.2, 0.44), "small-q4_k_m": (722, 588, 238.8, 0.48),
    "tinyllama-f16": (82.5, 78.1, 12.3, 0.72), "tinyllama-q8_0": (52.6, 53.9, 19.2, 0.60),
    "tinyllama-q4_0": (66.9, 65.5, 31.4, 0.53), "tinyllama-q4_k_m": (58.6, 63.3, 29.6, 0.53),
}
LAYER_PARAMS = {"small": 84_934_656, "tinyllama": 968_884_224}
KV_BYTES_PER_TOKEN = {"small": 12 * 2 * 768 * 2, "tinyllama": 22 * 2 * 256 * 2}  # f16, all layers
CONTEXT = 512  # petrel bench sizes the context for its longest test


def main(path):
    print("| file | test | t/s median (min–max) | fraction of roof | llama.cpp's fraction "
          "| vs llama.cpp | peak RSS MiB | file + KV MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        j = json.loads(line)
        name = os.path.basename(j["model"]).replace(".gguf", "")
        shape = name.split("-")[0]
        pp128, pp512, _, share = LLAMA[name]
        test = j["test"]
        if test.startswith("tg"):
            ours, theirs = j["fraction_of_read_roof"], share
        else:
            roof = 270e9 if j["compute_roof"] == "int8_dot" else 199e9
            rate = pp128 if test == "pp128" else pp512
            ours, theirs = j["fraction_of_compute_roof"], rate * 2 * LAYER_PARAMS[shape] / roof
        file_kv = (os.path.getsize(j["model"]) + KV_BYTES_PER_TOKEN[shape] * CONTEXT) / 2**20
        print(f"| {name} | {test} | {j['tokens_per_second']:.1f} ({j['min']:.1f}–{j['max']:.1f}) "
              f"| {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} "
              f"| {j['peak_rss_bytes'] / 2**20:.0f} | {file_kv:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
