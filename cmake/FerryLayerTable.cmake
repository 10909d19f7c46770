# Which src/ folders each layer may include (cmake/FerryLayers.cmake), bottom
# up; also read by the layering tests (tests/layers) in script mode.
set(FERRY_LAYERS core proxy socket ib nccl)
set(FERRY_LAYER_SEES_core   core)
set(FERRY_LAYER_SEES_proxy  core proxy)
set(FERRY_LAYER_SEES_socket core proxy socket)
set(FERRY_LAYER_SEES_ib     core proxy ib)
set(FERRY_LAYER_SEES_nccl   core proxy socket ib nccl)
# ferry-info: its own folder and the core's CPU quota reader; it reaches the
# plugin through the exported ABI only (dlopen).
set(FERRY_LAYER_SEES_info   core info)
# Who also sees include/nccl, NCCL's ABI: the adapters and ferry-info, a client of it.
set(FERRY_LAYERS_SEE_NCCL_ABI nccl info)
