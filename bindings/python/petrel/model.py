"""petrel.Model: a loaded model (petrel_model), its tokenizer, and the one-call conveniences
generate, chat and embed over a context of its own."""
import ctypes
import os
import queue
import threading

from . import _library as lib_
from .context import Context

_DONE = object()


class Model(lib_.Handle):
    """A loaded model, shared read-only by its contexts. Closed by close() or `with`.

    Model(path, device=None, gpu_layers=-1, n_threads=0, context=0, lora=()): path a GGUF
    file or Hugging Face folder; device/gpu_layers place layers on "cuda" or "vulkan"; the
    rest configure the context that generate, chat and embed use."""

    def __init__(self, path, device=None, gpu_layers=-1, **context_params):
        lib = lib_.library()
        params = lib.petrel_model_default_params()
        params.device = device.encode() if device else None
        params.gpu_layers = gpu_layers
        self._handle = ctypes.c_void_p()
        lib_.check(lib.petrel_model_load(os.fsencode(path), ctypes.byref(params),
                                         ctypes.byref(self._handle)))
        self._context_params = context_params
        self._own = None  # the context of generate/chat/embed, made on first use
        self._own_lock = threading.Lock()

    def close(self):
        if getattr(self, "_own", None) is not None:
            self._own.close()
            self._own = None
        if getattr(self, "_handle", None):
            lib_.library().petrel_model_free(self._handle)
            self._handle = ctypes.c_void_p()

    @property
    def n_vocab(self):
        return lib_.library().petrel_model_n_vocab(self._handle)

    def tokenize(self, text, add_special=True, parse_special=False):
        lib = lib_.library()
        data = text.encode()
        flags = (1 if add_special else 0) | (2 if parse_special else 0)
        n = ctypes.c_size_t()
        status = lib.petrel_tokenize(self._handle, data, len(data), flags, None, 0,
                                     ctypes.byref(n))
        if status not in (lib_.OK, lib_.ERR_BUFFER_TOO_SMALL):
            lib_.check(status)
        ids = (ctypes.c_int32 * max(n.value, 1))()
        lib_.check(lib.petrel_tokenize(self._handle, data, len(data), flags, ids, n.value,
                                       ctypes.byref(n)))
        return list(ids[:n.value])

    def detokenize(self, ids, special=False):
        lib = lib_.library()
        array = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        flags = 1 if special else 0
        n = ctypes.c_size_t()
        status = lib.petrel_detokenize(self._handle, array, len(ids), flags, None, 0,
                                       ctypes.byref(n))
        if status not in (lib_.OK, lib_.ERR_BUFFER_TOO_SMALL):
            lib_.check(status)
        out = ctypes.create_string_buffer(n.value + 1)
        lib_.check(lib.petrel_detokenize(self._handle, array, len(ids), flags, out, n.value + 1,
                                         ctypes.byref(n)))
        return out.raw[:n.value].decode(errors="replace")

    def apply_chat_template(self, messages, template=None, add_generation_prompt=True):
        """The prompt text of `messages` as the chat template renders it."""
        lib = lib_.library()
        array = lib_.chat_messages(messages)
        source = template.encode() if template is not None else None
        n = ctypes.c_size_t()
        status = lib.petrel_chat_apply_template(self._handle, source, array, len(messages),
                                                int(add_generation_prompt), None, 0,
                                                ctypes.byref(n))
        if status not in (lib_.OK, lib_.ERR_BUFFER_TOO_SMALL):
            lib_.check(status)
        out = ctypes.create_string_buffer(n.value + 1)
        lib_.check(lib.petrel_chat_apply_template(self._handle, source, array, len(messages),
                                                  int(add_generation_prompt), out, n.value + 1,
                                                  ctypes.byref(n)))
        return out.raw[:n.value].decode(errors="replace")

    def context(self, **params):
        """A new conversation (Context); keyword arguments as Context's."""
        return Context(self, **params)

    def generate(self, prompt, max_tokens=64, **sampling):
        """The continuation of `prompt` as an iterator of text pieces, each as it is generated.
        Sampling keywords: temperature (<= 0 greedy), seed, top_k, top_p, min_p,
        repeat_penalty, ignore_eos. Stopping the iteration early cancels the generation."""
        def run(ctx, on_text):
            ctx.reset()
            ctx.generate(prompt, on_text=on_text, max_tokens=max_tokens, **sampling)
        return self._stream(run)

    def chat(self, messages, max_tokens=256, template=None, **sampling):
        """The assistant's reply to `messages` ([{"role": ..., "content": ...}]) as an iterator of
        text pieces; the model's chat template unless `template` (Jinja text) is given. The
        previous call's conversation stays cached, so passing it again with a new message
        costs only the new message."""
        def run(ctx, on_text):
            ctx.chat(messages, template=template, on_text=on_text, max_tokens=max_tokens,
                     **sampling)
        return self._stream(run)

    def embed(self, texts):
        """One unit-length vector (a list of floats) per text; a single str gives one vector."""
        with self._own_lock:
            ctx = self._own_context()
            ctx.reset()
            if isinstance(texts, str):
                return ctx.embed(texts)
            return [ctx.embed(text) for text in texts]

    def _own_context(self):
        if self._own is None:
            self._own = Context(self, **self._context_params)
        return self._own

    def _stream(self, run):
        """Runs run(context, on_text) on a thread of its own and yields the pieces it streams.
        Leaving the loop early cancels the generation at its next token."""
        pieces = queue.Queue()
        stop = threading.Event()

        def worker():
            try:
                with self._own_lock:
                    run(self._own_context(), lambda piece: pieces.put(piece) or stop.is_set())
                pieces.put(_DONE)
            except BaseException as error:  # given to the caller's thread below
                pieces.put(error)

        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        try:
            while True:
                item = pieces.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()
