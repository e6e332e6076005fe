"""A small Llama-style decoder: RMSNorm, rotary position embeddings, SwiGLU, optional GQA.

One file, read top to bottom: config → norm → rotary → attention → feed-forward → block →
model → initialisation. Nothing here knows about sharding; train.py wraps the blocks with
FSDP2 after building the model on the meta device.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    vocab_size: int = 0  # 0: taken from the manifest's tokenizer
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 0  # 0: same as n_heads (no GQA)
    ffn_dim: int = 0  # 0: 8/3 * dim rounded up to multiple_of (Llama's SwiGLU width)
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    init_std: float = 0.02

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_hidden(self) -> int:
        if self.ffn_dim:
            return self.ffn_dim
        return self.multiple_of * math.ceil(int(8 * self.dim / 3) / self.multiple_of)

    def validate(self) -> None:
        if self.vocab_size <= 0:
            raise ValueError("model.vocab_size must be > 0 (it comes from the manifest)")
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_kv_heads < 0 or self.n_heads % self.kv_heads:
            raise ValueError(
                f"model.n_heads {self.n_heads} is not a multiple of n_kv_heads {self.kv_heads}"
            )
        if (self.dim // self.n_heads) % 2:
            raise ValueError("model head dim (dim / n_heads) must be even for rotary embeddings")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the compute dtype: bf16 squares lose too much.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


def rotary_tables(head_dim: int, seq_len: int, theta: float, device: torch.device | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every (position, frequency) pair, shape (seq_len, head_dim / 2)."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32)
                            / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of each head by the position's angle. x: (B, T, H, D)."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if self.n_kv_heads != self.n_heads:
            # GQA: each key/value head serves n_heads / n_kv_heads query heads.
            repeat = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(repeat, dim=2), v.repeat_interleave(repeat, dim=2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        # Rotary tables are derived, not learned: kept out of the state dict and rebuilt by
        # init_weights once the model has real storage (it is built on the meta device).
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids (B, T)."""
        t = tokens.shape[1]
        if t > self.rope_cos.shape[0]:
            raise ValueError(f"sequence of {t} tokens > max_seq_len {self.rope_cos.shape[0]}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))

    def non_embedding_params(self) -> int:
        """Parameters that take part in matmuls (all but the token embedding table)."""
        return sum(p.numel() for name, p in self.named_parameters()
                   if not name.startswith("tok_embeddings"))

    def init_rotary(self) -> None:
        """(Re)build the rotary tables on the parameters' device (after loading weights)."""
        self.rope_cos, self.rope_sin = rotary_tables(
            self.cfg.head_dim, self.cfg.max_seq_len, self.cfg.rope_theta,
            device=self.tok_embeddings.weight.device)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Fill every parameter from a generator keyed by (seed, parameter name).

        Each full tensor is drawn the same way whatever the number of processes and then
        handed to the parameter's shard, so a model sharded over 1 or 8 ranks starts from
        the same weights (and no two shards repeat each other's random numbers).
        Residual projections (wo, w2) get std / sqrt(2 * n_layers), as GPT-2 does.
        """
        self.init_rotary()
        device = self.tok_embeddings.weight.device
        for name, param in self.named_parameters():
            full = torch.empty(param.shape, dtype=torch.float32, device=device)
            if name.endswith("norm.weight"):
                full.fill_(1.0)
            else:
                std = self.cfg.init_std
                if name.endswith(("wo.weight", "w2.weight")):
                    std /= math.sqrt(2 * self.cfg.n_layers)
                gen = torch.Generator(device=device)
                gen.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
                full.normal_(0.0, std, generator=gen)
            copy_full_tensor(param, full)


def copy_full_tensor(param: torch.Tensor, full: torch.Tensor) -> None:
    """param <- full, where param may be a DTensor shard of the full tensor."""
    try:
        from torch.distributed.tensor import DTensor, distribute_tensor
    except ImportError:  # torch without distributed
        DTensor = ()  # noqa: N806
    if isinstance(param, DTensor):
        # Every rank holds the same full tensor, so keep the local piece (no communication).
        shard = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(shard.to_local())
    else:
        param.copy_(full)
