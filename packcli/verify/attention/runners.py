"""Runners: one model plus one way of calling it. The control call is always the clean one."""

from __future__ import annotations

from typing import Any

from packcli.verify.attention.backends import CausalAttention


class TinyRunner:
    """``packcli.verify.attention.model`` with a pluggable backend; the control uses ``CausalAttention``."""

    def __init__(self, model: Any, backend: Any) -> None:
        self.model, self.backend = model, backend
        self.reference = CausalAttention("reference")
        self.control_key = "tiny"
        self.vocab_size = model.config.vocab_size
        self.rotary_module = model.rotary

    def embed(self, ids: Any) -> Any:
        return self.model.embed_tokens(ids)

    def packed(self, embeds: Any, position_ids: Any, cu_seqlens: Any, max_seqlen: int) -> Any:
        return self.model(inputs_embeds=embeds, position_ids=position_ids, cu_seqlens=cu_seqlens,
                          max_seqlen=max_seqlen, attention=self.backend)

    def control(self, embeds: Any, position_ids: Any) -> Any:
        import torch

        cu = torch.tensor([0, embeds.shape[0]], dtype=torch.int32, device=embeds.device)
        return self.model(inputs_embeds=embeds, position_ids=position_ids, cu_seqlens=cu,
                          max_seqlen=embeds.shape[0], attention=self.reference)

    def probe_weight(self) -> Any:
        return self.model.probe_weight()

    def start_recording(self) -> None:
        if getattr(self.backend, "records", None) is not None:
            self.backend.records.clear()

    def cross_mass(self) -> tuple[float, ...] | None:
        records = getattr(self.backend, "records", None)
        if not records:
            return None
        import torch

        return tuple(float(x) for x in torch.stack(records).mean(0))


class HfRunner:
    """A ``transformers`` causal LM fed one packed row ``[1, T]``, called the way ``variant`` says."""

    def __init__(self, model: Any, impl: str, variant: str) -> None:
        import inspect

        self.model, self.impl, self.variant = model, impl, variant
        self.control_key = f"hf:{impl}"
        self.vocab_size = model.config.vocab_size
        self.rotary_module = model.model.rotary_emb
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"  # renamed in 5.x

    def embed(self, ids: Any) -> Any:
        return self.model.get_input_embeddings()(ids)

    def packed(self, embeds: Any, position_ids: Any, cu_seqlens: Any, max_seqlen: int) -> Any:
        import torch

        kwargs: dict[str, Any] = {"inputs_embeds": embeds[None], "position_ids": position_ids[None]}
        if self.variant != "default_kwargs":
            kwargs["use_cache"] = self.variant == "cache"
        if self.variant == "attention_mask":
            kwargs["attention_mask"] = torch.ones(1, embeds.shape[0], dtype=torch.long, device=embeds.device)
        if self.variant == "cache":
            from transformers.cache_utils import DynamicCache

            kwargs[self._cache_kwarg] = DynamicCache(config=self.model.config)
        if self.variant == "cu_seqlens":
            cu = cu_seqlens.to(torch.int32)
            kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_seqlen, max_length_k=max_seqlen)
        return self.model(**kwargs).logits[0]

    def control(self, embeds: Any, position_ids: Any) -> Any:
        return self.model(inputs_embeds=embeds[None], position_ids=position_ids[None], use_cache=False).logits[0]

    def probe_weight(self) -> Any:
        return self.model.model.layers[0].self_attn.q_proj.weight

    def start_recording(self) -> None:
        pass

    def cross_mass(self) -> None:
        return None  # fused kernels do not expose probabilities
