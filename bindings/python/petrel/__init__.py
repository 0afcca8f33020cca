"""petrel: the C API of libpetrel (include/petrel/petrel.h) from Python, with ctypes only.

    import petrel
    model = petrel.Model("story-f32.gguf")
    for piece in model.generate("Once upon a time", max_tokens=32, temperature=0):
        print(piece, end="", flush=True)
    vectors = model.embed(["a dog", "a cat"])
    reply = "".join(model.chat([{"role": "user", "content": "Hi"}]))

    with model.context() as ctx:  # a conversation of one's own, saved and loaded
        text = ctx.generate("Once upon a time", max_tokens=32, temperature=0)
        ctx.save("story.session")

libpetrel is found from $PETREL_LIBRARY (a path to libpetrel.so), else beside this package
(in its folder or the folder holding it), else by the system loader. Errors raise
petrel.Error with the library's message.
"""
from ._library import SEED_RANDOM, Error, library, version
from .context import Context
from .model import Model

__all__ = ["Context", "Error", "Model", "SEED_RANDOM", "library", "version"]
