"""GGUF -> bf16 Hugging Face folder, run once by provision.py in vLLM's venv (not the project's).

    python convert.py MODEL.gguf OUT_MODEL_DIR OUT_LLAMA3_TOKENIZER_DIR

transformers dequantizes the GGUF's tensors as it loads them (with gguf + accelerate); the
folder it saves is what `vllm serve` loads, with the chat template (tools included) the GGUF
carries. Each output is written to a temporary name and renamed when complete, so an interrupted
run leaves nothing that looks finished.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# vLLM's llama3_json parser looks this token up in the tokenizer's vocabulary when it is built
# and refuses to start without it (Llama 3's "begin a tool call" marker); Qwen's vocabulary has
# no such token. Added as a special token in a tokenizer of its own (`--tokenizer`), it takes an
# id below the embedding table's size (151,936 rows for ~151,665 tokens), the model never emits
# it, and the parser then reads Qwen's JSON calls. The hermes run keeps the model's tokenizer.
LLAMA3_BOT_TOKEN = "<|python_tag|>"


def main(gguf: Path, model_dir: Path, tokenizer_dir: Path) -> None:
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.bfloat16)
    # The weights are dequantized by now, but the model still carries the GGUF "quantizer",
    # and save_pretrained refuses a model quantized by GGUF as not serializable: dropped, the
    # model saves as the plain bf16 checkpoint it is.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    _save(model_dir, lambda out: (model.save_pretrained(out), tokenizer.save_pretrained(out)))
    tokenizer.add_special_tokens({"additional_special_tokens": [LLAMA3_BOT_TOKEN]})
    if tokenizer.convert_tokens_to_ids(LLAMA3_BOT_TOKEN) >= model.config.vocab_size:
        raise SystemExit(f"{LLAMA3_BOT_TOKEN} got an id past the embedding table")
    _save(tokenizer_dir, tokenizer.save_pretrained)


def _save(target: Path, write: object) -> None:
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    write(partial)  # type: ignore[operator]
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
