"""The dataset card (``README.md``): what makes an artifact folder a Hugging Face dataset repository.

Its YAML header has the ``configs`` block that points ``datasets.load_dataset(out_dir)`` (and the Hub,
after an upload of the folder as it is) at the shards alone; without it, ``load_dataset`` would also
pick up ``examples.parquet``, whose columns differ. The body says what a trainer needs before the
first step: the counts, the contract version, and the two recipes of docs/training.md word for word
(TRL padding-free, and a resumable PyTorch loop); the page has the why of each setting.

The card is written from the manifest's hashed fields only, before the manifest, which pins its
sha256: same inputs and configuration give the same bytes, and ``verify`` catches an edited card.
"""

from __future__ import annotations

from pathlib import Path

from packcli.artifact.manifest import FilePin, Manifest
from packcli.contract import CARD_NAME, CONTRACT_VERSION, file_sha256

SHARD_GLOB = "shard-*.parquet"
ARTIFACT, MODEL = "<ARTIFACT>", "<MODEL>"  # the recipes' placeholders: the packed folder, the model trained

# The two recipes of docs/training.md, word for word (tests/test_training_doc.py runs the page's copies and
# checks they are these): the card and the page can never teach two ways to load the same packs.
TRL_RECIPE = """from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

model_name = "<MODEL>"  # the model whose tokenizer made the packs
tokenizer = AutoTokenizer.from_pretrained(model_name)
model = AutoModelForCausalLM.from_pretrained(model_name, attn_implementation="sdpa")  # or "flash_attention_2"
ds = load_dataset("<ARTIFACT>", split="train")  # the shards only (the card's `configs`)
args = SFTConfig(
    output_dir="run/",
    padding_free=True,  # no padding, no attention_mask: positions restart at every example
    max_length=None,  # the packs are at most the capacity long already
    dataset_kwargs={"skip_prepare_dataset": True},  # tokenized and packed already: no re-tokenizing
    per_device_train_batch_size=1,  # packs per step (TRL's batch-size warning is about unpacked rows)
    report_to="none",
)
trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
trainer.train()
"""
TORCH_RECIPE = """from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from packcli.data import PackDataset, PackLoader, collate_hf, global_supervised

model = AutoModelForCausalLM.from_pretrained("<MODEL>", attn_implementation="sdpa")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
ds = PackDataset("<ARTIFACT>", batch_packs=2, collate=collate_hf, seed=0)  # rank, world from torch.distributed
loader = PackLoader(ds, num_workers=2)  # a DataLoader (batch_size=None) that counts the batches it hands out
checkpoint = Path("run/checkpoint.pt")
epochs, save_every, step, first_epoch = 2, 2, 0, 0

if checkpoint.exists():  # resume: the weights, the optimizer and the loader's position, saved together
    saved = torch.load(checkpoint, weights_only=False)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    loader.load_state_dict(saved["data"])  # the epoch, and how many of its batches were trained on
    first_epoch, step = saved["data"]["epoch"], saved["step"]

for epoch in range(first_epoch, epochs):
    ds.set_epoch(epoch)  # the order of epoch e is a function of (seed, e); a resumed epoch goes on where it stopped
    for batch in loader:
        n = global_supervised([batch])  # the step's supervised labels, over every rank
        loss = model(**batch, num_items_in_batch=n).loss  # summed token losses / n (x world size under DDP)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step % save_every == 0:  # mid-epoch, with the weights that saw exactly these batches
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "data": loader.state_dict(), "step": step}, checkpoint)
"""


def recipe(text: str, *, artifact: str, model: str) -> str:
    """A recipe with its placeholders filled."""
    return text.replace(ARTIFACT, artifact).replace(MODEL, model)


CARD_FOLDER, CARD_MODEL = "path/to/this/folder", "ORG/NAME"


def render_card(manifest: Manifest) -> str:
    """The card's text for a manifest (its hashed fields; ``contract_version`` is this packcli's)."""
    counts = manifest.counts
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
| capacity | {manifest.config.capacity:,} tokens per pack |
| loss policy | {manifest.loss_policy} |
| tokenizer | sha256 `{manifest.tokenizer.sha256[:16]}` |
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
{recipe(TRL_RECIPE, artifact=CARD_FOLDER, model=CARD_MODEL)}```

Do not set `packing=True` (TRL would re-pack the rows and forget their seams), do not pass an
`attention_mask`, and keep `use_cache=False`. Check a consumer before a long run:
`packcli verify <folder> --consumer trl` runs TRL's own collator on these packs.

## Train with PyTorch

```python
{recipe(TORCH_RECIPE, artifact=CARD_FOLDER, model=CARD_MODEL)}```

The loader's state is saved mid-epoch with the weights, so a resumed run trains on the batches after
the checkpoint, exactly once (packcli's docs/training.md says why and how to normalise the loss).
"""
    return header + "\n" + body


def write_card(directory: Path, manifest: Manifest) -> FilePin:
    """Write ``README.md`` into ``directory``; return its manifest entry (name, bytes, sha256)."""
    path = Path(directory) / CARD_NAME
    path.write_text(render_card(manifest), encoding="utf-8")
    return FilePin(CARD_NAME, path.stat().st_size, file_sha256(path))
