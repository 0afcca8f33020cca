"""The C API from Python through python/petrel.py (ctypes only): greedy and seeded sampled
text equal to `petrel run`'s, cancellation and resumption, errors as exceptions with the
library's message.

Usage: test_capi.py PETREL_BIN MODEL (with PETREL_LIBRARY naming libpetrel.so)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import petrel  # noqa: E402

PROMPT = "Once upon a time"
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def main():
    petrel_bin, model_path = sys.argv[1], sys.argv[2]
    expected = subprocess.run([petrel_bin, "run", "-m", model_path, "-p", PROMPT, "-n", "32",
                               "--temp", "0"], check=True, capture_output=True).stdout.decode()
    sampled = subprocess.run([petrel_bin, "run", "-m", model_path, "-p", PROMPT, "-n", "48",
                              "--seed", "42"], check=True, capture_output=True).stdout.decode()
    check(petrel.version() != "", "version")
    with petrel.Model(model_path) as model:
        ids = model.tokenize(PROMPT)
        check(model.detokenize(ids) == PROMPT, "tokenize round trip")
        with model.context() as ctx:
            text = ctx.generate(PROMPT, max_tokens=32, temperature=0.0, seed=1)
            check(text + "\n" == expected, f"greedy text {text!r} == petrel run's {expected!r}")

            # Sampling with the defaults and a seed draws what `petrel run --seed` draws.
            ctx.reset()
            text = ctx.generate(PROMPT, max_tokens=48, seed=42)
            check(text + "\n" == sampled, f"sampled text {text!r} == petrel run's {sampled!r}")

            ctx.reset()
            seen = []
            first = ctx.generate(PROMPT, on_text=lambda piece: seen.append(piece) or len(seen) >= 3,
                                 max_tokens=32, temperature=0.0)
            check(ctx.stop_reason == "cancelled", "cancelled after 3 pieces")
            rest = ctx.generate("", max_tokens=32 - 3, temperature=0.0)
            check(first + rest + "\n" == expected, f"resumed text {first + rest!r}")

        try:
            with model.context() as ctx:
                ctx.generate("x", max_tokens=-7)
            check(False, "max_tokens -7 raises")
        except petrel.Error as error:
            check(error.status == "INVALID_ARGUMENT" and "max_tokens" in str(error), str(error))
    try:
        petrel.Model("/nonexistent/model.gguf")
        check(False, "a missing model raises")
    except petrel.Error as error:
        check(error.status == "IO" and "/nonexistent/model.gguf" in str(error), str(error))
    if failures:
        print(f"{len(failures)} checks failed", file=sys.stderr)
        return 1
    print("test_capi.py: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
