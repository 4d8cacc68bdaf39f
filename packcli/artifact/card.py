"""The dataset card (``README.md``): what makes an artifact folder a Hugging Face dataset repository.

Its YAML header has the ``configs`` block that points ``datasets.load_dataset(out_dir)`` (and the Hub,
after an upload of the folder as it is) at the shards alone; without it, ``load_dataset`` would also
pick up ``examples.parquet``, whose columns differ. The body says what a trainer needs before the
first step: the counts, the contract version, the loading snippet and the TRL settings that keep the
seams (docs/training.md has the why of each).

The card is written from the manifest's hashed fields only, before the manifest, which pins its
sha256: same inputs and configuration give the same bytes, and ``verify`` catches an edited card.
"""

from __future__ import annotations

from pathlib import Path

from packcli.contract import CARD_NAME, CONTRACT_VERSION, file_sha256

SHARD_GLOB = "shard-*.parquet"


def render_card(manifest: dict) -> str:
    """The card's text for a manifest (its hashed fields; ``contract_version`` is this packcli's)."""
    counts, config = manifest["counts"], manifest["config"]
    examples = counts["packed"] + counts["truncated"] + counts["split"]  # segments: a split example's chunks each
    chunks = f", {counts['split']:,} chunks of examples split at the capacity" if counts["split"] else ""
    tokens, supervised = counts["tokens"], counts["supervised_tokens"]
    header = "\n".join([
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: \"{SHARD_GLOB}\"",
        "tags:",
        "- packcli",
        "- packed",
        "- padding-free",
        "---",
    ])
    body = f"""
# Packed training data (packcli)

Made by `packcli pack` (packing contract {CONTRACT_VERSION}). One row per pack: several examples
concatenated with no padding, with the seams stored beside the tokens so that no example attends to
or is supervised by another.

| | |
|---|---|
| packs (rows) | {counts["packs"]:,} |
| examples | {examples:,} ({counts["truncated"]:,} truncated to the capacity{chunks}) |
| tokens | {tokens:,} |
| supervised tokens | {supervised:,} |
| capacity | {config["capacity"]:,} tokens per pack |
| loss policy | {manifest["loss_policy"]} |
| tokenizer | sha256 `{manifest["tokenizer"]["sha256"][:16]}` |
| contract version | {CONTRACT_VERSION} |

Columns: `input_ids`, `labels` (unshifted, -100 = no loss, the first label of every example is -100),
`position_ids` (restart at 0 at every example), `cu_seqlens` (flash-attn boundaries),
`seq_lengths` (the same seams, as TRL reads them), `example_ids`, `num_tokens`, `num_supervised`.
`manifest.json` pins everything that shaped a seam; `examples.parquet` traces every example to its
source line.

## Load

```python
from datasets import load_dataset

ds = load_dataset("path/to/this/folder", split="train")   # the shards only (see `configs` above)
```

## Train with TRL (padding-free)

```python
from trl import SFTConfig, SFTTrainer

args = SFTConfig(
    padding_free=True,                                  # TRL builds positions from seq_lengths
    max_length=None,                                    # packs are already cut to {config["capacity"]}
    dataset_kwargs={{"skip_prepare_dataset": True}},      # the rows are tokenized and packed already
    per_device_train_batch_size=1,                      # packs per step; each is up to {config["capacity"]} tokens
)
trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
```

Do not set `packing=True` (TRL would re-pack the rows and forget their seams), do not pass an
`attention_mask`, and keep `use_cache=False`. Check a consumer before a long run:
`packcli verify <folder> --consumer trl` runs TRL's own collator on these packs.

## Train with PyTorch

```python
from torch.utils.data import DataLoader
from packcli.data import PackDataset, collate_hf

ds = PackDataset("path/to/this/folder", batch_packs=4, collate=collate_hf, seed=0)
loader = DataLoader(ds, batch_size=None, num_workers=2)
```
"""
    return header + "\n" + body


def write_card(directory: Path, manifest: dict) -> dict:
    """Write ``README.md`` into ``directory``; return its manifest entry (name, bytes, sha256)."""
    path = Path(directory) / CARD_NAME
    path.write_text(render_card(manifest), encoding="utf-8")
    return {"name": CARD_NAME, "bytes": path.stat().st_size, "sha256": file_sha256(path)}
