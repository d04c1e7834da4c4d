"""Row positions of the vectors the extended physics reads, as module constants.

`surrogate.extended` writes its formulas once for two callers: numpy over a whole table, where
`f[TP]` is the tp row of the (`ROW_FIELDS`, rows) matrix, and the compiled loop of
`surrogate.extended_kernel`, where `f` is one row's column and `f[TP]` one float. Constant
integer positions (numba freezes a module's ints when it compiles) are what lets one indexing
expression mean both, where a name lookup (a dict, `NEW_COLUMNS.index`) runs only in Python.
tests/surrogate_tests/test_slots.py checks every constant against the name it stands for.
"""

from __future__ import annotations

from surrogate.physics import ROW_FIELDS
from surrogate.records import NEW_COLUMNS

# `ROW_FIELDS` (the dense fields; "recompute" is RECOMPUTE_CODE beside physics.RECOMPUTE)
NUM_LAYERS = ROW_FIELDS.index("num_layers")
HIDDEN_SIZE = ROW_FIELDS.index("hidden_size")
NUM_ATTENTION_HEADS = ROW_FIELDS.index("num_attention_heads")
NUM_QUERY_GROUPS = ROW_FIELDS.index("num_query_groups")
FFN_HIDDEN_SIZE = ROW_FIELDS.index("ffn_hidden_size")
VOCAB_SIZE = ROW_FIELDS.index("vocab_size")
GATED_MLP = ROW_FIELDS.index("gated_mlp")
FLASH_ATTENTION = ROW_FIELDS.index("flash_attention")
SEQ_LENGTH = ROW_FIELDS.index("seq_length")
GLOBAL_BATCH_SIZE = ROW_FIELDS.index("global_batch_size")
MICRO_BATCH_SIZE = ROW_FIELDS.index("micro_batch_size")
PRECISION = ROW_FIELDS.index("precision")
RECOMPUTE_CODE = ROW_FIELDS.index("recompute")
NUM_GPUS = ROW_FIELDS.index("num_gpus")
TP = ROW_FIELDS.index("tp")
PP = ROW_FIELDS.index("pp")
DP = ROW_FIELDS.index("dp")
VIRTUAL_STAGES = ROW_FIELDS.index("virtual_stages")
SCHEDULE = ROW_FIELDS.index("schedule")
SEQUENCE_PARALLEL = ROW_FIELDS.index("sequence_parallel")
DISTRIBUTED_OPTIMIZER = ROW_FIELDS.index("distributed_optimizer")
OVERLAP_GRAD_REDUCE = ROW_FIELDS.index("overlap_grad_reduce")
GPUS_PER_NODE = ROW_FIELDS.index("gpus_per_node")
INTRA_NODE_BANDWIDTH_GBPS = ROW_FIELDS.index("intra_node_bandwidth_GBps")
INTER_NODE_BANDWIDTH_GBPS = ROW_FIELDS.index("inter_node_bandwidth_Gbps")

# `NEW_COLUMNS` (choices as their index in surrogate.records.CHOICES)
KV_CHANNELS = NEW_COLUMNS.index("kv_channels")
QK_LAYERNORM = NEW_COLUMNS.index("qk_layernorm")
NUM_EXPERTS = NEW_COLUMNS.index("num_experts")
MOE_ROUTER_TOPK = NEW_COLUMNS.index("moe_router_topk")
MOE_FFN_HIDDEN_SIZE = NEW_COLUMNS.index("moe_ffn_hidden_size")
MOE_SHARED_EXPERT_INTERMEDIATE_SIZE = NEW_COLUMNS.index("moe_shared_expert_intermediate_size")
MULTI_LATENT_ATTENTION = NEW_COLUMNS.index("multi_latent_attention")
QK_HEAD_DIM = NEW_COLUMNS.index("qk_head_dim")
QK_POS_EMB_HEAD_DIM = NEW_COLUMNS.index("qk_pos_emb_head_dim")
V_HEAD_DIM = NEW_COLUMNS.index("v_head_dim")
FP8_RECIPE = NEW_COLUMNS.index("fp8_recipe")
CUDA_GRAPHS = NEW_COLUMNS.index("cuda_graphs")
MOE_TOKEN_DISPATCHER = NEW_COLUMNS.index("moe_token_dispatcher")
MOE_OVERLAP_EP_COMM = NEW_COLUMNS.index("moe_overlap_ep_comm")
GRAD_REDUCE_IN_FP32 = NEW_COLUMNS.index("grad_reduce_in_fp32")
CP = NEW_COLUMNS.index("cp")
DATA_PARALLEL_SHARDING = NEW_COLUMNS.index("data_parallel_sharding")
CP_COMM_TYPE = NEW_COLUMNS.index("cp_comm_type")
EP = NEW_COLUMNS.index("ep")
EXPERT_TP = NEW_COLUMNS.index("expert_tp")
TP_COMM_OVERLAP = NEW_COLUMNS.index("tp_comm_overlap")
FIRST_STAGE_LAYERS = NEW_COLUMNS.index("first_stage_layers")
LAST_STAGE_LAYERS = NEW_COLUMNS.index("last_stage_layers")
OVERLAP_PARAM_GATHER = NEW_COLUMNS.index("overlap_param_gather")
NVLINK_DOMAIN = NEW_COLUMNS.index("nvlink_domain")
MTP_NUM_LAYERS = NEW_COLUMNS.index("mtp_num_layers")
MOE_FIRST_DENSE_LAYERS = NEW_COLUMNS.index("moe_first_dense_layers")
MOE_LAYER_FREQ = NEW_COLUMNS.index("moe_layer_freq")

# The dense physics features the extended physics reads (surrogate.kernel.PHYSICS_FEATURES,
# as the feature matrix holds them: float32 read back as float64), a (DENSE_READ, rows) matrix.
DENSE_READ: tuple[str, ...] = (
    "params", "model_flops", "stage_params", "est_log_time_s", "est_log_memory_bytes",
    "time_layer_compute_s", "time_host_excess_s", "time_tp_comm_s", "time_attention_s",
    "hw_peak_bf16", "time_dp_comm_s", "time_stage_mb_s", "time_layer_s", "time_layer_host_s",
    "time_recompute_s", "time_tp_overlap_saving_s", "activation_bytes", "weight_state_bytes",
    "gemm_efficiency", "layer_saved_bytes", "time_dp_exposed_s", "time_optimizer_s",
    "mem_first_bytes", "mem_last_bytes")
D_PARAMS, D_MODEL_FLOPS, D_STAGE_PARAMS, D_EST_LOG_TIME, D_EST_LOG_MEMORY = range(5)
D_LAYER_COMPUTE, D_HOST_EXCESS, D_TP_COMM, D_ATTENTION, D_PEAK_BF16 = range(5, 10)
D_DP_COMM, D_STAGE_MB, D_LAYER, D_LAYER_HOST, D_RECOMPUTE = range(10, 15)
D_TP_OVERLAP_SAVING, D_ACTIVATIONS, D_WEIGHT_STATES, D_GEMM_EFFICIENCY, D_LAYER_SAVED = range(15, 20)
D_DP_EXPOSED, D_OPTIMIZER, D_MEM_FIRST, D_MEM_LAST = range(20, 24)

# Per-model values (surrogate.extended.model_values), a (MODEL_VALUES, rows) matrix.
MODEL_VALUES: tuple[str, ...] = ("moe_layers", "active_ffn", "routed_params", "params_all",
                                 "params_active", "forward_flops_per_token", "attention_weights")
M_MOE_LAYERS, M_ACTIVE_FFN, M_ROUTED, M_PARAMS_ALL, M_PARAMS_ACTIVE, M_FORWARD, M_ATTENTION = range(7)

# What the table's lookups give each row (surrogate.extended.lookups: per distinct GPU and
# recipe, MoE launch key, memory settings, ...), a (LOOKUPS, rows) matrix.
LOOKUPS: tuple[str, ...] = ("peak_lp", "lp_efficiency", "lp_element_bytes", "lp_copies",
                            "lp_amax_pass", "lp_transposes", "lp_quantize_Bps",
                            "token_copies", "moe_host_s", "held_bytes_per_param",
                            "main_bytes_per_param", "held_sharded_bytes_per_param",
                            "sharding_level", "est_time_s", "est_memory_bytes")
(A_PEAK_LP, A_LP_EFF, A_ELEMENT, A_LP_COPIES, A_AMAX, A_TRANSPOSES, A_QUANTIZE_BPS,
 A_TOKEN_COPIES, A_MOE_HOST, A_HELD, A_MAIN, A_HELD_SHARDED, A_LEVEL, A_EST_TIME,
 A_EST_MEMORY) = range(15)
