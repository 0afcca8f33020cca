"""simple.py: load a model and stream a greedy continuation of a prompt, with the petrel
package (bindings/python; ctypes, no pip).

    PYTHONPATH=bindings/python PETREL_LIBRARY=build/src/capi/libpetrel.so \
        python3 examples/simple.py MODEL [PROMPT]
"""
import sys

import petrel


def main():
    if len(sys.argv) < 2:
        print(f"usage: {sys.argv[0]} MODEL [PROMPT]", file=sys.stderr)
        return 2
    prompt = sys.argv[2] if len(sys.argv) > 2 else "Once upon a time"
    try:
        with petrel.Model(sys.argv[1]) as model:
            print(prompt, end="", flush=True)
            for piece in model.generate(prompt, max_tokens=32, temperature=0):
                print(piece, end="", flush=True)
            print()
    except petrel.Error as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
