"""petrel.Context: one conversation's KV cache (petrel_context); use it from one thread at a
time."""
import ctypes
import os

from . import _library as lib_


class Context(lib_.Handle):
    """A conversation: prompts append to what it holds; save() and load() keep it on disk."""

    def __init__(self, model, n_threads=0, context=0, batch_tokens=512, lora=()):
        lib = lib_.library()
        params = lib.petrel_context_default_params()
        params.n_threads = n_threads
        params.context = context
        params.batch_tokens = batch_tokens
        adapters = (ctypes.c_char_p * max(len(lora), 1))(*[os.fsencode(a) for a in lora])
        params.lora = adapters
        params.n_lora = len(lora)
        self._model = model  # the model outlives its contexts
        self._handle = ctypes.c_void_p()
        lib_.check(lib.petrel_context_new(model._handle, ctypes.byref(params),
                                          ctypes.byref(self._handle)))
        self.stop_reason = None
        self.n_prompt_tokens = 0

    def close(self):
        if getattr(self, "_handle", None):
            lib_.library().petrel_context_free(self._handle)
            self._handle = ctypes.c_void_p()

    def reset(self):
        lib_.check(lib_.library().petrel_context_reset(self._handle))

    def generate(self, prompt, on_text=None, **sampling):
        """Generates and returns the text; `on_text(piece)` returning True cancels (then
        stop_reason is "cancelled" and generate("") resumes)."""
        return self._collect(lambda cb, params, result: lib_.library().petrel_generate(
            self._handle, prompt.encode(), len(prompt.encode()), params, cb, None, result),
            on_text, sampling)

    def chat(self, messages, template=None, on_text=None, **sampling):
        """The assistant's reply to `messages` ([{"role", "content"}, ...]) rendered with the
        model's chat template or `template` (its Jinja text); what the context holds of the
        same conversation is reused."""
        array = lib_.chat_messages(messages)
        source = template.encode() if template is not None else None
        return self._collect(lambda cb, params, result: lib_.library().petrel_generate_chat(
            self._handle, source, array, len(messages), params, cb, None, result),
            on_text, sampling)

    def embed(self, text):
        """One unit-length vector (a list of floats) for `text`; what the context holds stays."""
        lib = lib_.library()
        data = text.encode()
        n = ctypes.c_size_t()
        status = lib.petrel_embed(self._handle, data, len(data), None, 0, ctypes.byref(n))
        if status != lib_.ERR_BUFFER_TOO_SMALL:
            lib_.check(status)
        vector = (ctypes.c_float * n.value)()
        lib_.check(lib.petrel_embed(self._handle, data, len(data), vector, n.value,
                                    ctypes.byref(n)))
        return list(vector)

    def save(self, path):
        lib_.check(lib_.library().petrel_context_save(self._handle, os.fsencode(path)))

    def load(self, path):
        lib_.check(lib_.library().petrel_context_load(self._handle, os.fsencode(path)))

    def _collect(self, run, on_text, sampling):
        """Runs run(callback, params, result) and returns the text; `on_text(piece)` sees each
        non-empty piece as a str and cancels by returning True."""
        params = lib_.sampling_params(**sampling)
        result = lib_.GenerateResult(struct_size=ctypes.sizeof(lib_.GenerateResult))
        pieces = []
        failure = []

        def callback(text, length, _user):
            piece = ctypes.string_at(text, length).decode(errors="replace")
            pieces.append(piece)
            try:
                return 1 if (piece and on_text and on_text(piece)) else 0
            except BaseException as error:  # raised again below, after the C call returns
                failure.append(error)
                return 1

        status = run(lib_.CALLBACK(callback), ctypes.byref(params), ctypes.byref(result))
        self.stop_reason = lib_.STOP_REASONS.get(result.stop_reason, "none")
        self.n_prompt_tokens = result.n_prompt_tokens
        if failure:
            raise failure[0]
        if status != lib_.ERR_CANCELLED:
            lib_.check(status)
        return "".join(pieces)
