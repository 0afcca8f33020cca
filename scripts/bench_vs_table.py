#!/usr/bin/env python3
"""The side-by-side table of scripts/bench_vs.sh, and the tagging of its raw lines.

  bench_vs_table.py tag ENGINE PASS FILE [PEAK_RSS_KIB] < json-lines >> raw.jsonl
  bench_vs_table.py raw.jsonl

A row per file and test: each engine's median tokens/s over the passes; the median, min and max
of the per-pass ratios petrel / llama.cpp (the two engines ran back to back in each pass, so a
ratio compares runs under the same load); the fraction of the roof (read roof for generation,
f32 FMA or int8 dot roof for prompts) that `petrel bench` measured in that pass, for petrel and
for llama.cpp's rate against the same roof; peak RSS of petrel (per test) and of llama-bench (its
whole run, from GNU time), and the file size.
"""
import json
import os
import statistics
import sys
from collections import defaultdict


def tag(engine, pass_index, path, rss_kib=""):
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        j.update({"engine": engine, "pass": int(pass_index), "file": path})
        if rss_kib.strip().isdigit():
            j["peak_rss_kib"] = int(rss_kib)
        print(json.dumps(j))


def test_name(j):
    # Both engines write type_k; rows of another KV cache type than the default are named apart.
    kv = j.get("type_k", "f16")
    suffix = f" kv {kv}" if kv != "f16" else ""
    if j["engine"] == "petrel":
        return j["test"] + suffix
    name = f"pp{j['n_prompt']}" if j["n_prompt"] > 0 else f"tg{j['n_gen']}"
    depth = j.get("n_depth", 0)
    return (f"{name} @ d{depth}" if depth else name) + suffix


def rate(j):
    if j["engine"] == "petrel":
        return j["tokens_per_second"]
    return statistics.median(j["samples_ts"])


def fraction(j):
    if "fraction_of_read_roof" in j:
        return j["fraction_of_read_roof"]
    return j.get("fraction_of_compute_roof")


def fa_label(value):
    return {0: "fa off", 1: "fa on", -1: "fa auto"}.get(value, f"fa {value}")


def table(path):
    runs = defaultdict(dict)  # (file, test) -> {(engine, pass): line}
    llama_rss = defaultdict(int)
    lines = [json.loads(line) for line in open(path)]
    # llama-bench given several flash-attention settings (-F on,off) writes a row for each: each
    # setting is then compared on its own, and the faster of them per pass on a row of its own.
    fa_values = {j.get("flash_attn") for j in lines if j["engine"] == "llama"}
    several_fa = len(fa_values) > 1
    for j in lines:
        engine = j["engine"]
        if engine == "llama" and several_fa:
            engine = f"llama {fa_label(j.get('flash_attn'))}"
        runs[(j["file"], test_name(j))][(engine, j["pass"])] = j
        if j["engine"] == "llama" and "peak_rss_kib" in j:
            llama_rss[j["file"]] = max(llama_rss[j["file"]], j["peak_rss_kib"])
    print("| file | test | petrel t/s | llama.cpp t/s | petrel / llama.cpp, median (min–max) "
          "| passes | petrel's fraction of roof | llama.cpp's | petrel peak RSS MiB "
          "| llama-bench peak RSS MiB | file MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (file, test), by_run in runs.items():
        variants = sorted({e for (e, _) in by_run if e != "petrel"})
        if several_fa and len(variants) > 1:
            # The faster llama.cpp setting in each pass, as a variant of its own.
            for p in {p for (_, p) in by_run}:
                candidates = [by_run[(v, p)] for v in variants if (v, p) in by_run]
                if candidates:
                    by_run[("llama faster", p)] = max(candidates, key=rate)
            variants.append("llama faster")
        for variant in variants or ["llama"]:
            label = test if not several_fa else f"{test} ({variant.replace('llama', 'llama.cpp')})"
            row(file, label, by_run, variant, llama_rss)


def row(file, test, by_run, variant, llama_rss):
    passes = sorted({p for (_, p) in by_run})
    ours, theirs, ratios, our_frac, their_frac, rss = [], [], [], [], [], 0
    for p in passes:
        mine, other = by_run.get(("petrel", p)), by_run.get((variant, p))
        if mine:
            ours.append(rate(mine))
            rss = max(rss, mine.get("peak_rss_bytes", 0))
        if other:
            theirs.append(rate(other))
        if mine and other and rate(other) > 0:
            ratios.append(rate(mine) / rate(other))
            f = fraction(mine)
            if f is not None:
                our_frac.append(f)
                their_frac.append(f * rate(other) / rate(mine))

    def med(values, fmt):
        return format(statistics.median(values), fmt) if values else "–"

    spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if ratios else ""
    name = os.path.basename(file).removesuffix(".gguf")
    print(f"| {name} | {test} | {med(ours, '.1f')} | {med(theirs, '.1f')} "
          f"| {med(ratios, '.2f')}{spread} | {len(ratios)} | {med(our_frac, '.2f')} "
          f"| {med(their_frac, '.2f')} | {rss / 2**20:.0f} "
          f"| {llama_rss[file] / 1024:.0f} | {os.path.getsize(file) / 2**20:.0f} |")


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "tag":
        tag(*sys.argv[2:6])
    elif len(sys.argv) == 2:
        table(sys.argv[1])
    else:
        sys.exit(__doc__)
