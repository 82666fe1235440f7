"""Hand-written tiny torch architectures exported by build_models.py.

Only imported by the builder (needs torch); nothing else in hexfuse imports this.
"""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


class InceptionBlock(nn.Module):
    """GoogLeNet v1 style inception block (Szegedy et al. 2014, no BatchNorm).

    Four independent branches that all read the block input and meet in one Concat:
      b1: 1x1 conv
      b2: 1x1 conv -> 3x3 conv
      b3: 1x1 conv -> 5x5 conv
      b4: 3x3 maxpool (stride 1) -> 1x1 conv
    """

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int):
        super().__init__()
        self.b1 = nn.Conv2d(cin, c1, 1)
        self.b2_reduce = nn.Conv2d(cin, c3r, 1)
        self.b2 = nn.Conv2d(c3r, c3, 3, padding=1)
        self.b3_reduce = nn.Conv2d(cin, c5r, 1)
        self.b3 = nn.Conv2d(c5r, c5, 5, padding=2)
        self.b4 = nn.Conv2d(cin, cp, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y1 = F.relu(self.b1(x))
        y2 = F.relu(self.b2(F.relu(self.b2_reduce(x))))
        y3 = F.relu(self.b3(F.relu(self.b3_reduce(x))))
        y4 = F.relu(self.b4(F.max_pool2d(x, 3, stride=1, padding=1)))
        return torch.cat([y1, y2, y3, y4], dim=1)


class InceptionMini(nn.Module):
    """Tiny GoogLeNet: stem conv + maxpool, 2 inception blocks, maxpool, GAP, FC.  Input [1,3,32,32]."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.inc3a = InceptionBlock(16, 8, 8, 16, 4, 8, 8)  # -> 40 channels
        self.inc3b = InceptionBlock(40, 16, 12, 24, 4, 8, 8)  # -> 56 channels
        self.fc = nn.Linear(56, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(x)), 2)  # 16x16
        x = self.inc3a(x)
        x = self.inc3b(x)
        x = F.max_pool2d(x, 2)  # 8x8
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x)


class DenseTopKMoE(nn.Module):
    """Mixture-of-experts layer with a top-k softmax router and E separate SwiGLU experts.

    Static-shape ("dense dispatch") formulation used by graph exporters that cannot express a
    data-dependent token gather: every expert runs on every token and its output is scaled by the
    router weight, which is zero for experts outside the token's top-k.  Each expert is its own
    MatMul chain reading the same input, so the E expert chains are mutually independent
    (and independent of the router until the final weighted sum).
    """

    def __init__(self, hidden: int = 64, inter: int = 128, num_experts: int = 4, top_k: int = 2):
        super().__init__()
        self.top_k = top_k
        self.num_experts = num_experts
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.gate = nn.ModuleList(nn.Linear(hidden, inter, bias=False) for _ in range(num_experts))
        self.up = nn.ModuleList(nn.Linear(hidden, inter, bias=False) for _ in range(num_experts))
        self.down = nn.ModuleList(nn.Linear(inter, hidden, bias=False) for _ in range(num_experts))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        probs = F.softmax(self.router(hidden_states), dim=-1)  # [B,S,E]
        top_v, top_i = torch.topk(probs, self.top_k, dim=-1)
        top_v = top_v / top_v.sum(dim=-1, keepdim=True)
        # [B,S,E] routing weights, zero outside the top-k
        weights = torch.zeros_like(probs).scatter(-1, top_i, top_v)
        out = torch.zeros_like(hidden_states)
        for e in range(self.num_experts):
            y = self.down[e](F.silu(self.gate[e](hidden_states)) * self.up[e](hidden_states))
            out = out + y * weights[..., e : e + 1]
        return out


class MlpChain(nn.Module):
    """Negative control: a strictly sequential MLP (no two compute nodes are independent)."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.fc3 = nn.Linear(hidden, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.fc1(x))
        x = torch.tanh(self.fc2(x))
        return self.fc3(x)
