#!/usr/bin/env bash
# Installs llama.cpp (through llama-cpp-python, pinned, built from source by pip: about 9
# minutes on two cores) into its own virtual environment at target/llama-cpp, and measures it
# on SmolLM2: greedy decode of the same prompt `ttmesh decode` uses, with 2 threads, on this
# host. `ttmesh bench decode` prints the figures beside the emulator's (the host's real
# yardstick for an LLM step). Writes target/llama-cpp-decode.json. Optional: nothing else in
# the repository needs it. Idempotent: an installed, matching version is kept.
# Needs python3 with venv and a C/C++ compiler (cmake and ninja come from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.3.36
venv=target/llama-cpp
model=$(bash scripts/fetch-model.sh)

if ! "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$version')" 2>/dev/null; then
    echo "llama-cpp-setup: building llama-cpp-python==$version into $venv (several minutes)" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "llama-cpp-python==$version"
fi

"$venv/bin/python" - "$model" target/llama-cpp-decode.json <<'PY'
import json, sys, time
from llama_cpp import Llama

model, out = sys.argv[1:]
prompt, new_tokens, threads = "Once upon a time", 32, 2
llm = Llama(model_path=model, n_ctx=256, n_threads=threads, n_threads_batch=threads,
            n_batch=64, seed=0, verbose=False, logits_all=True)
tokens = llm.tokenize(prompt.encode(), add_bos=True)
# Warm-up: the first eval maps the weights and builds the graph. logits_all keeps each
# evaluated position's logits in `scores` (without it they stay inside the sampler).
llm.eval(tokens)
llm.reset()
llm.eval(tokens)
ids, steps = [], []
for _ in range(new_tokens):
    # Greedy: the argmax of the last position's logits, as `ttmesh decode` does.
    tok = int(llm.scores[llm.n_tokens - 1].argmax())
    ids.append(tok)
    t = time.perf_counter()
    llm.eval([tok])
    steps.append(time.perf_counter() - t)
steps.sort()
median = steps[len(steps) // 2]
result = {
    "llama_cpp_python": __import__("llama_cpp").__version__,
    "model": model,
    "threads": threads,
    "prompt": prompt,
    "token_ids": ids,
    "median_step_ms": median * 1e3,
    "tokens_per_s": 1.0 / median,
}
json.dump(result, open(out, "w"), indent=1)
print(f"llama.cpp {result['llama_cpp_python']} ({threads} threads): median step "
      f"{result['median_step_ms']:.2f} ms, {result['tokens_per_s']:.1f} tokens/s; ids {ids}")
PY
