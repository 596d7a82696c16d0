"""GGUF -> bf16 Hugging Face folder, run once by provision.py in vLLM's venv (not the project's).

    python convert.py MODEL.gguf OUT_MODEL_DIR OUT_LLAMA3_TOKENIZER_DIR

transformers dequantizes the GGUF's tensors as it loads them (with gguf + accelerate); the
folder it saves is what `vllm serve` loads, with the chat template (tools included) the GGUF
carries. Each output is written to a temporary name and renamed when complete, so an interrupted
run leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# vLLM's llama3_json parser looks this token up in the tokenizer's vocabulary when it is built
# and refuses to start without it (Llama 3's "begin a tool call" marker); Qwen's vocabulary has
# no such token. The GGUF's vocabulary is padded to the embedding table's 151,936 rows with
# unused `[PADnnnnnn]` entries, so one of them is renamed to it in a tokenizer of its own
# (`--tokenizer`): the id stays inside the table (a token added at the end would not), the
# model never emits it, and the parser then reads Qwen's JSON calls. The hermes run keeps the
# model's tokenizer.
LLAMA3_BOT_TOKEN = "<|python_tag|>"
PAD_ENTRY = re.compile(r"\[PAD\d+\]")


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
    _save(tokenizer_dir, lambda out: _llama3_tokenizer(model_dir, out))


def _llama3_tokenizer(model_dir: Path, out: Path) -> None:
    """The model's tokenizer files with one unused padding entry renamed LLAMA3_BOT_TOKEN (a
    special token at the same id)."""
    out.mkdir()
    for name in ("tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, out / name)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = spec["model"]["vocab"]
    pad = min((token for token in vocab if PAD_ENTRY.fullmatch(token)), key=vocab.__getitem__)
    token_id = vocab.pop(pad)
    vocab[LLAMA3_BOT_TOKEN] = token_id
    spec["added_tokens"].append({"id": token_id, "content": LLAMA3_BOT_TOKEN,
                                 "single_word": False, "lstrip": False, "rstrip": False,
                                 "normalized": False, "special": True})
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False))
    check = AutoTokenizer.from_pretrained(str(out))
    if check.convert_tokens_to_ids(LLAMA3_BOT_TOKEN) != token_id:
        raise SystemExit(f"{LLAMA3_BOT_TOKEN} is not token {token_id} in {out}")


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
