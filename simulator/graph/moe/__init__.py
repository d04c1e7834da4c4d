"""The mixture-of-experts MLP of a transformer layer, one module per role as Megatron-Core keeps
them in `megatron/core/transformer/moe/`: `router` (router.py: scores and top-k), `dispatch`
(token_dispatcher.py: permutation and the all-to-all / all-gather of tokens to their experts and
back, and the host synchronization dropless routing costs), `experts` (experts.py: the grouped
GEMMs of the local experts), `layer` (moe_layer.py: the composition, with the shared experts).
"""
