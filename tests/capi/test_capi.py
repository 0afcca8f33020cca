"""The C API from Python through the petrel package (bindings/python, ctypes only): greedy
and seeded sampled text equal to `petrel run`'s, Model.generate as an iterator (and leaving it
early), cancellation and resumption, chat with a template, embeddings, a saved and loaded
session, a LoRA adapter equal to `petrel run --lora`, errors as exceptions with the library's
message.

Usage: test_capi.py PETREL_BIN MODEL SCRATCH_DIR (with PETREL_LIBRARY naming libpetrel.so)."""
import math
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "bindings", "python"))
sys.path.insert(0, here)
import petrel  # noqa: E402
from story_adapter import write_story_adapter  # noqa: E402

PROMPT = "Once upon a time"
TEMPLATE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def run(petrel_bin, *args):
    return subprocess.run([petrel_bin, "run", *args], check=True,
                          capture_output=True).stdout.decode()


def check_model_calls(model, expected):
    ids = model.tokenize(PROMPT)
    check(model.detokenize(ids) == PROMPT, "tokenize round trip")
    pieces = list(model.generate(PROMPT, max_tokens=32, temperature=0.0))
    check(len(pieces) > 1 and "".join(pieces) + "\n" == expected,
          f"Model.generate pieces {pieces!r} join to petrel run's {expected!r}")
    # Leaving the loop early cancels; the next call starts afresh.
    for i, _ in enumerate(model.generate(PROMPT, max_tokens=32, temperature=0.0)):
        if i == 2:
            break
    again = "".join(model.generate(PROMPT, max_tokens=32, temperature=0.0))
    check(again + "\n" == expected, f"after an early stop {again!r}")

    messages = [{"role": "user", "content": "Tell me a story about a dog."}]
    rendered = model.apply_chat_template(messages, template=TEMPLATE)
    check(rendered == "user: Tell me a story about a dog.\nassistant:", repr(rendered))
    reply = "".join(model.chat(messages, template=TEMPLATE, max_tokens=12, temperature=0.0))
    direct = "".join(model.generate(rendered, max_tokens=12, temperature=0.0))
    check(reply == direct and reply != "", f"chat {reply!r} == generate {direct!r}")
    try:
        list(model.chat(messages, max_tokens=4))
        check(False, "chat without a template raises")
    except petrel.Error as error:
        check(error.status == "STATE" and "chat template" in str(error), str(error))

    vectors = model.embed(["a dog", "a cat", "a dog"])
    check(len(vectors) == 3 and len(vectors[0]) > 0, "three vectors")
    check(abs(math.sqrt(sum(v * v for v in vectors[0])) - 1.0) < 1e-3, "unit length")
    check(vectors[0] == vectors[2] and vectors[0] != vectors[1], "same text, same vector")


def check_context_calls(model, expected, sampled, scratch):
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
        session = os.path.join(scratch, "python.session")
        ctx.save(session)
        rest = ctx.generate("", max_tokens=32 - 3, temperature=0.0)
        check(first + rest + "\n" == expected, f"resumed text {first + rest!r}")
    with model.context() as ctx:
        ctx.load(session)
        rest = ctx.generate("", max_tokens=32 - 3, temperature=0.0)
        check(first + rest + "\n" == expected, f"loaded and resumed text {first + rest!r}")
    try:
        with model.context() as ctx:
            ctx.generate("x", max_tokens=-7)
        check(False, "max_tokens -7 raises")
    except petrel.Error as error:
        check(error.status == "INVALID_ARGUMENT" and "max_tokens" in str(error), str(error))


def check_lora(petrel_bin, model_path, expected, scratch):
    adapter = os.path.join(scratch, "python_story_adapter.gguf")
    write_story_adapter(adapter)
    adapted = run(petrel_bin, "-m", model_path, "-p", PROMPT, "-n", "24", "--temp", "0",
                  "--lora", adapter)
    check(not expected.startswith(adapted.rstrip("\n")), "the adapter changes the text")
    with petrel.Model(model_path, lora=[adapter]) as model:
        text = "".join(model.generate(PROMPT, max_tokens=24, temperature=0.0))
        check(text + "\n" == adapted, f"LoRA text {text!r} == petrel run --lora's {adapted!r}")
    with petrel.Model(model_path) as model, model.context(lora=[adapter + ":0"]) as ctx:
        text = ctx.generate(PROMPT, max_tokens=32, temperature=0.0)
        check(text + "\n" == expected, f"scale 0 gives the base text {text!r}")
    os.remove(adapter)


def main():
    petrel_bin, model_path, scratch = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(scratch, exist_ok=True)
    expected = run(petrel_bin, "-m", model_path, "-p", PROMPT, "-n", "32", "--temp", "0")
    sampled = run(petrel_bin, "-m", model_path, "-p", PROMPT, "-n", "48", "--seed", "42")
    check(petrel.version() != "", "version")
    with petrel.Model(model_path) as model:
        check_model_calls(model, expected)
        check_context_calls(model, expected, sampled, scratch)
    check_lora(petrel_bin, model_path, expected, scratch)
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
