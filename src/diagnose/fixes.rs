//! Fix texts for scan findings, taken from shared/FAILURES.md (the five failures vramdoc
//! exists for) and its "common knowledge" section. One place, so every output agrees.

/// Stray cuda:0 allocation (FAILURES.md §1, OneDiff / OneFlow).
pub const STRAY_CONTEXT: &str =
    "Start the process with CUDA_VISIBLE_DEVICES=<the GPU it works on> \
and keep using cuda:0 in code: it can then only see that physical GPU. Long-term fix: run \
warm-up and initialisation on the model's device (OneFlow's conv-tuning warm-up runs on \
device 0 whatever device was picked).";

/// Memory with no live owner (FAILURES.md, common knowledge).
pub const NO_LIVE_OWNER: &str = "The driver returns a process's memory when it exits; memory \
that stays used with no live owner means a stuck process or a driver problem. Look for \
leftover processes (`fuser -v /dev/nvidia*`), stop them, then reset the GPU \
(`nvidia-smi --gpu-reset -i N`) or reboot. (Graphics clients such as Xorg are not in the \
compute-process list, but vramdoc reads the graphics and MPS lists too and counts them as owners.) When the processes holding the GPU device files open are named, a forked child (e.g. a DataLoader worker) that inherited its parent's descriptors keeps the parent's memory alive after the parent exited: stop it.";

/// Coherent-memory GPUs (GH200/GB200) keep freed pages counted as used (nvml.h).
pub const COHERENT_UNRECLAIMED: &str = "On coherent-memory platforms (GH200, GB200: the GPU's \
memory is a NUMA node of the host) NVML counts pages freed by an exited process as used until \
the kernel reclaims them, and they are reclaimed when an allocation needs them (nvml.h, \
nvmlDeviceGetMemoryInfo). Nothing to stop: compare with `numastat -m` for that node, and only \
if a new allocation fails while no process holds the GPU (`fuser -v /dev/nvidia*`), reset it.";

/// A device the driver would not answer for.
pub const DEVICE_UNAVAILABLE: &str = "A lost GPU (fallen off the bus, NVML_ERROR_GPU_IS_LOST; Xid 79) needs the node rebooted (NVIDIA's Xid catalogue: a restart of the machine); check `dmesg` for Xid errors. `no permission` means this user or container may not query the device: run vramdoc as a user with access, or mount the device into the container. Every other device is reported as usual.";

/// Processes not visible from this PID namespace (FAILURES.md, common knowledge).
pub const INVISIBLE_PROCESSES: &str = "NVML reports host PIDs, which do not map to processes \
in this container. Run vramdoc on the host or in the host PID namespace \
(`docker run --pid=host ...`) to attribute memory to processes.";

/// Memory of processes outside this container's PID namespace (issue 25).
pub const OUTSIDE_NAMESPACE: &str = "From driver 535.113 on, NVML shows a caller outside the \
host PID namespace only its own namespace's processes (and from 535.113 to 560 with 0 bytes): \
memory of every other container on this GPU is counted as used but listed nowhere here. Run \
vramdoc on the host, or in a container with the host PID namespace (`docker run --pid=host`, \
Kubernetes `hostPID: true`), to attribute it; from here it is not a sign of lost memory.";

/// Per-process memory not reported by NVML.
pub const USAGE_UNAVAILABLE: &str = "NVML reports per-process memory as not available (typical \
in containers without the host PID namespace, or under Windows WDDM). Run vramdoc on the \
host to see per-process memory; device totals above are still exact.";

/// Over-committed utilisation (FAILURES.md §5, WeClone on vLLM).
pub const LOW_HEADROOM: &str = "Give a new engine at most the gpu_memory_utilization shown \
(vLLM claims utilization x total up front, and KV growth, activations and CUDA-graph capture \
need memory outside that budget: WeClone needed 0.5 instead of 0.9 on a 16 GiB card). Also \
use smaller batches / max_num_seqs or quantised weights, and turn on CUDA graphs only once \
the run is stable; or free memory held by other processes. `vramdoc plan vllm MODEL_DIR` \
works out, for a model, the flags that start beside them (docs/plan.md).";

/// Double model load (FAILURES.md §4, CogVLM composite demo).
pub const DUPLICATE_COPY: &str = "If this is one model, use one loading path only: either \
device_map=\"auto\" or one full copy per GPU that can hold it, not both; or load in lower \
precision, or use a larger single card. (Tensor-parallel or data-parallel workers hold \
near-equal shards by design: then nothing is wrong.)";

/// A GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST; Xid 79 in the kernel log: "GPU has
/// fallen off the bus", whose immediate action in NVIDIA's Xid catalogue is RESTART_BM, a
/// restart of the machine, not RESET_GPU: docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
pub const GPU_LOST: &str = "The GPU fell off the bus (Xid 79: check `dmesg | grep -i xid` for \
the NVRM line): its memory and every context on it are gone, and nothing on it can be trusted \
again before the node restarts. Drain the node (`kubectl drain NODE` / `scontrol update \
nodename=NODE state=drain`), stop the processes using the GPU, then reboot the node: NVIDIA's \
Xid catalogue gives Xid 79 a restart of the machine, not a GPU reset. The catalogue names \
failures of the PCIe link as a frequent cause: look for them in the kernel log (AER messages) and the \
system event log; if it recurs, check power, cooling and the PCIe slot, and have the board \
replaced.";
/// An allocation failed (any of the five failures can end here; the other fingerprints say
/// which).
pub const OUT_OF_MEMORY: &str = "Read the other findings of this report first: they name the \
pattern that led here (memory growing per input size, memory not released, a model loaded \
twice, an over-committed budget, a stray context or another process). Otherwise the job \
needs more memory than the GPU has free: smaller batches or inputs, lower precision or \
quantised weights, activation checkpointing, or a larger card.";

/// Multi-size OOM (FAILURES.md §2, OneDiff).
pub const GROWTH_WITHOUT_RELEASE: &str = "Memory from earlier phases stays cached and \
fragmented, so each new input size adds to it (torch.cuda.empty_cache() does not release \
another framework's cache). Process sizes largest first (e.g. [1536, 1360, 1152, 1024]) so \
the first, largest allocation is reused by the smaller ones; or disable the per-shape tuning \
warm-up (ONEFLOW_CONV2D_KERNEL_ENABLE_TUNING_WARMUP=0), trading some speed for stable memory.";

/// Sharded model not released (FAILURES.md §3, xDiT with FSDP).
pub const NOT_RELEASED: &str = "The distributed runtime (process group, NCCL communicators and \
their buffers) keeps sharded parameters alive on every device, and the caching allocator \
keeps freed blocks reserved. Release in this order on every rank: `del model`, then \
`torch.distributed.destroy_process_group()`, then `gc.collect()`, then \
`torch.cuda.empty_cache()`.";

/// Double model load (FAILURES.md §4, CogVLM composite demo).
pub const DOUBLE_LOAD: &str = "The model is in memory twice: a full copy on one GPU and a \
device_map=\"auto\" copy split across the GPUs. Use one loading path only: either \
device_map=\"auto\" or one full copy per GPU that can hold it, not both; or load in lower \
precision, or use a larger single card.";

/// Over-committed utilisation (FAILURES.md §5, WeClone on vLLM).
pub const OVERCOMMIT: &str = "The engine claimed about gpu_memory_utilization x total up \
front; KV growth, activations and CUDA-graph capture then need memory outside that budget, \
which is not there. Lower gpu_memory_utilization (WeClone needed 0.5 instead of 0.9 on a \
16 GiB card); also smaller batches / max_num_seqs or quantised weights, and turn on CUDA \
graphs only once the run is stable.";

/// Memory held after the job's processes exited (FAILURES.md, common knowledge).
pub const HELD_AFTER_EXIT: &str = "The driver returns a process's memory when it exits; \
memory that stays used after every process of the job is gone means a process that did not \
really exit (a zombie or a child outside the tree still holding the device) or a driver \
problem. Look for leftover processes (`fuser -v /dev/nvidia*`), stop them, then reset the \
GPU (`nvidia-smi --gpu-reset -i N`) or reboot.";

/// A process of the job still holding GPU memory after the command ended (issue 17; GNU
/// `timeout`'s process-group signalling and `-k`).
pub const OUTLIVED_COMMAND: &str = "A process the command started still runs and holds GPU \
memory after the command itself ended: a DataLoader worker or other child that was not \
joined, a process started in the background (`&`, `nohup`, `setsid`), or a container that \
was not removed. Its memory returns when it exits: end it (`kill PID`, `docker stop`), wait \
for your children before exiting (join worker pools, `wait` in shell scripts), or let \
`vramdoc run --kill-after DURATION` end it (SIGTERM, then SIGKILL after DURATION).";
/// A job process NVML does not list keeps memory allocated through device files it inherited
/// (issue 25, item 9: a worker forked after CUDA was initialised outliving its parent).
pub const HELD_BY_DESCRIPTOR: &str = "A process forked after CUDA was initialised inherits \
the CUDA context's open device files (/dev/nvidia*); while any process holds them the driver \
keeps the context's memory allocated, though NVML lists only the process that created it \
(now exited) or nobody. End the holder (`kill PID`, or `vramdoc run --kill-after DURATION`), \
join or stop worker processes before the main process exits, and fork workers before CUDA \
is initialised or start them with the `spawn` or `forkserver` start method \
(torch.multiprocessing).";
/// Fragmentation at an out-of-memory error: PyTorch held at least the request reserved but
/// unallocated (pytorch/pytorch#29554). `expandable_segments` is suggested only where the
/// job's `PYTORCH_CUDA_ALLOC_CONF` does not already set it (pytorch/pytorch#173049).
pub const FRAGMENTATION: &str = "PyTorch's caching allocator held enough memory for the \
request, but in blocks too small or split to serve it (fragmentation: variable shapes, \
tensors freed between long-lived ones).";
pub const FRAGMENTATION_EXPANDABLE: &str = " Set \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so segments grow in place instead of \
splitting, or torch.cuda.empty_cache() between phases of different shapes; pad inputs to a \
few bucket sizes.";
pub const FRAGMENTATION_ALREADY_EXPANDABLE: &str = " expandable_segments is already on in \
this job's PYTORCH_CUDA_ALLOC_CONF (PyTorch prints its advice regardless, \
pytorch/pytorch#173049): pad inputs to a few bucket sizes, drop references to large \
temporaries before the next large allocation, and call torch.cuda.empty_cache() between \
phases of different shapes; or lower the batch.";

/// The NCCL watchdog aborted the job (a collective timed out): not a GPU memory failure.
pub const COLLECTIVE_TIMEOUT: &str = "A collective (all-reduce, all-gather, ...) did not \
complete within the process group's timeout, and PyTorch's NCCL watchdog aborted the \
process (SIGABRT). This is not a GPU memory failure, however full the GPU was: look for a \
rank that stalled or died first (its own error, a data-loader hang, uneven batches so ranks \
call different collectives), check the interconnect (NCCL_DEBUG=INFO, nccl-tests), and raise \
the timeout (init_process_group(timeout=...)) only for legitimately long steps.";

/// The host's OOM killer (SIGKILL, no CUDA out-of-memory line): host RAM, not GPU memory.
pub const HOST_OOM_KILL: &str = "SIGKILL with no GPU out-of-memory error is most often the \
kernel's OOM killer (host RAM, or the container's cgroup memory limit), not GPU memory. \
Confirm with `dmesg -T | grep -i -E 'killed process|out of memory'` (or the container's \
OOMKilled status), then lower host memory use: fewer or lighter DataLoader workers, no \
whole-dataset loads into RAM, CPU offload (DeepSpeed, FSDP) sized to the host, or a larger \
memory limit.";

/// Growth through PyTorch's caching allocator (added to [`GROWTH_WITHOUT_RELEASE`]).
pub const GROWTH_TORCH: &str = " With PyTorch, torch.cuda.empty_cache() between sizes returns \
the earlier sizes' cached blocks, and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets one \
segment grow instead of keeping one per size.";
/// ... where the job already sets `expandable_segments:True`.
pub const GROWTH_TORCH_EXPANDABLE_ON: &str = " With PyTorch (expandable_segments is already on \
in this job's PYTORCH_CUDA_ALLOC_CONF), torch.cuda.empty_cache() between sizes returns the \
earlier sizes' cached blocks; if it still grows, something keeps references to each size's \
tensors (a list of outputs, a per-shape cache).";

/// A pod's process on a GPU the kubelet did not allocate to it (issue 18; k8s-device-plugin
/// #61, #87, #195: images with `NVIDIA_VISIBLE_DEVICES=all`, privileged pods, hostPath
/// device mounts).
pub const UNALLOCATED_GPU_USE: &str = "The process uses a GPU the scheduler gave to another \
pod (or to none): jobs on that GPU can run out of memory with no cause they can see. The usual \
causes: a pod that requests no `nvidia.com/gpu` but whose image sets \
NVIDIA_VISIBLE_DEVICES=all (set NVIDIA_VISIBLE_DEVICES=void in pods without GPUs, or use the \
device plugin's volume-mounts or CDI strategy with `accept-nvidia-visible-devices-envvar-when-unprivileged=false`), \
a privileged pod (it sees every GPU), or /dev/nvidia* mounted through hostPath. Request the \
GPU the pod uses, or stop it from seeing the others.";

/// A pod's GPU use outside what pod-resources lists, where DRA claims may be unlisted (issue
/// 37): the kubelet's `KubeletPodResourcesDynamicResources` gate (kubernetes
/// `pkg/features/kube_features.go`: alpha, off, from 1.27; beta, on, from 1.34).
pub const POD_ALLOCATION_UNKNOWN: &str = "Unknown from this node: whether the pod holds this \
GPU through a DRA ResourceClaim of NVIDIA's driver (gpu.nvidia.com). The kubelet reports a \
pod's DRA devices in pod-resources only with its KubeletPodResourcesDynamicResources feature \
gate on, which is alpha and off by default in Kubernetes 1.27 to 1.33 (on by default from \
1.34). To make it decidable on a kubelet before 1.34, turn the gate on \
(`--feature-gates=KubeletPodResourcesDynamicResources=true`, or `featureGates:` in the \
KubeletConfiguration) and restart the kubelet; vramdoc then sees each pod's claims and \
reports unallocated-gpu-use only where the pod holds neither a device-plugin GPU nor a claim \
on it. Meanwhile, `kubectl get resourceclaims -n NAMESPACE` shows the pod's claims: if it has \
none on this GPU, it uses a GPU it was not given.";

/// A GPU allocated to a pod that none of its processes uses (issue 18).
pub const ALLOCATED_GPU_IDLE: &str = "The pod holds a GPU the scheduler cannot give to anyone \
else, and none of its processes has used it for the time shown: a notebook left open, a job \
waiting on something else, a request for more GPUs than the code uses (a process on one of \
several allocated GPUs). Release it (scale the workload down or delete the pod), or request \
fewer GPUs. Time-sliced and MIG allocations count per device id.";

/// An out-of-memory error the job recovered from: it exited 0 (issue 26: fairseq skips the
/// batch, batch-size finders retry smaller, TensorRT skips a tactic).
pub const OOM_RECOVERED: &str = "The job caught the out-of-memory error and finished (exit \
0): nothing failed, but each recovery cost a skipped batch, a retried step or a slower \
tactic. If the count grows, lower the batch or input size a little so the peak fits, or \
leave more memory free on the GPU.";

/// PyTorch's per-process cap (`X allowed;`): the allocator refused before the GPU was full.
pub const OOM_FRACTION_CAP: &str = "PyTorch refused the allocation at the per-process cap \
(`X allowed` in the error: torch.cuda.set_per_process_memory_fraction, or \
per_process_memory_fraction in PYTORCH_CUDA_ALLOC_CONF), not because the GPU was full. Raise \
the fraction (or remove the call) if the GPU is this job's, or make the job fit the cap: \
smaller batches, lower precision, activation checkpointing.";

/// Which allocator-configuration variable the job's PyTorch reads (pytorch/pytorch#167659,
/// #183387).
pub const TORCH_ALLOC_CONF_NAMES: &str = " PyTorch before 2.8 reads only \
PYTORCH_CUDA_ALLOC_CONF; 2.8 and later document PYTORCH_ALLOC_CONF and warn that \
PYTORCH_CUDA_ALLOC_CONF is deprecated, yet 2.9.1 ignores expandable_segments given through \
PYTORCH_ALLOC_CONF on CUDA (pytorch/pytorch#183387): set PYTORCH_CUDA_ALLOC_CONF, which every \
version honours.";

/// TensorFlow's BFC allocator ran out (allow_growth, per_process_gpu_memory_fraction).
pub const OOM_TENSORFLOW: &str = "TensorFlow's BFC allocator could not place the tensor. \
TensorFlow maps nearly all GPU memory at start unless told otherwise: enable memory growth \
(tf.config.experimental.set_memory_growth(gpu, True); TF1: \
config.gpu_options.allow_growth=True) when the GPU is shared, or cap it \
(per_process_gpu_memory_fraction / a logical device memory_limit). If the job alone needs \
more, lower the batch size or input resolution, or use mixed precision.";

/// XLA's preallocation (JAX).
pub const OOM_JAX: &str = "XLA could not allocate the buffer. JAX preallocates 75% of the GPU \
at start: when several processes share the GPU set XLA_PYTHON_CLIENT_PREALLOCATE=false, or \
XLA_PYTHON_CLIENT_MEM_FRACTION to a share each fits in; if the job alone needs more, lower \
the batch, shard the model (pjit/sharding) or use rematerialisation (jax.checkpoint).";

/// NCCL's buffers could not be allocated.
pub const OOM_NCCL: &str = "NCCL could not allocate its communication buffers: the ranks' \
own allocations left too little free on the GPU. Leave headroom for NCCL (a lower \
gpu_memory_utilization or per-process memory fraction, a smaller batch), reduce its buffers \
(NCCL_BUFFSIZE, fewer channels with NCCL_MAX_NCHANNELS), and create the process group before \
loading the model so its buffers are allocated first.";

/// llama.cpp / ggml (and Ollama) could not allocate a backend buffer.
pub const OOM_LLAMA_CPP: &str = "llama.cpp could not allocate a GPU buffer for the model's \
layers, its KV cache or its compute graph. Offload fewer layers (-ngl / --n-gpu-layers; \
Ollama: num_gpu), use a smaller context (-c / --ctx-size; Ollama: num_ctx) or a quantised KV \
cache (--cache-type-k q8_0), a smaller quantisation of the model, or split across GPUs \
(--tensor-split).";

/// TensorRT's builder or runtime could not allocate.
pub const OOM_TENSORRT: &str = "TensorRT could not allocate device memory (its builder \
skips the tactic and fails when none fits). Lower the builder's workspace limit \
(setMemoryPoolLimit(kWORKSPACE, …) / trtexec --memPoolSize=workspace:N), the optimisation \
profile's maximum shapes or batch, or build on a GPU with more free memory.";

/// PaddlePaddle's allocator could not allocate (its own message, Paddle PR #19779).
pub const OOM_PADDLE: &str = "PaddlePaddle could not allocate on the GPU. Check what else \
holds memory on that GPU (another process, or a second PaddlePaddle process started on it); \
if the job alone needs more, lower the batch size. Under the legacy allocator, \
FLAGS_fraction_of_gpu_memory_to_use sets the share PaddlePaddle takes at start.";

/// text-generation-inference's warm-up found no room for a full prefill batch.
pub const OOM_TGI: &str = "text-generation-inference's warm-up ran a prefill batch of \
--max-batch-prefill-tokens and it did not fit after the weights. Lower \
--max-batch-prefill-tokens (and --max-input-length / --max-total-tokens with it), quantise \
the weights (--quantize), shard across more GPUs (--num-shard), or free the GPU of other \
processes; --cuda-memory-fraction below 1 leaves room for others and shrinks the budget.";

/// ONNX Runtime's CUDA execution provider arena could not grow.
pub const OOM_ONNXRUNTIME: &str = "ONNX Runtime's CUDA arena could not allocate the \
buffer. Its arena grows in powers of two by default and does not return memory: set the \
CUDA execution provider's arena_extend_strategy to kSameAsRequested and a gpu_mem_limit that \
leaves room for the other models or processes on the GPU, or limit the input shapes (batch, \
sequence length, image size).";

/// MXNet's pooled storage manager could not allocate.
pub const OOM_MXNET: &str = "MXNet's storage manager could not allocate on the GPU (it \
keeps freed blocks pooled for reuse, so other processes see them as used). Lower the batch \
size or input size, or free the GPU of other processes.";

/// vLLM's KV cache is too small for the model's context.
pub const OOM_VLLM_KV: &str = "vLLM's KV cache cannot hold one request at the model's \
maximum length within gpu_memory_utilization. Lower --max-model-len to what the cache holds, \
use an fp8 KV cache (--kv-cache-dtype fp8) or quantised weights, add GPUs \
(--tensor-parallel-size), or raise --gpu-memory-utilization when nothing else uses the GPU.";

/// A CUDA failure that is not an allocation failure.
pub const CUDA_ERROR: &str = "This is not a memory failure: do not chase memory. An illegal \
address or a device-side assert is a bug in a kernel or its inputs (out-of-range indices, \
labels outside the number of classes): rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing \
call, or on CPU to get a readable error. \"Driver too old\" or \"no kernel image\" means the \
framework was built for a newer driver or another GPU architecture: update the driver or \
install a build for it (on vramdoc's simulated box: give it a newer driver, `--sim SPEC@580` \
or `vramdoc sim init SPEC --driver 580`, whose CUDA 13.0 today's PyTorch from PyPI accepts). An ECC or launch failure: check `nvidia-smi -q` and the kernel log \
for Xid errors.";

/// SGLang's KV cache pool does not fit after the weights (sgl-project/sglang#322, #4330).
pub const OOM_SGLANG: &str = "SGLang reserves (1 - mem_fraction_static) of the whole GPU \
for activations and CUDA graphs and gives the rest, after the weights, to the KV cache pool; \
with large weights nothing is left. Raise --mem-fraction-static a little (the error's own \
advice) if the GPU is otherwise empty, or shrink the need: a smaller --context-length, \
quantised weights or KV cache (--kv-cache-dtype fp8_e5m2), or more GPUs (--tp). An OOM while \
serving is the opposite case: lower --mem-fraction-static then.";

/// `no-live-owner` at info: the bytes are managed (unified) memory of a live process.
pub const MANAGED_MEMORY: &str = "Managed (unified) memory (cudaMallocManaged, RMM's \
managed_memory_resource, CUDA unified memory) resident on a GPU is counted in its used memory \
but in no process's usage (nvtop#213, pynvml#63, rmm#2259): it belongs to the process named, \
and is freed when that process frees it or exits. Nothing to stop. If the bytes stay after \
that process has exited, scan again: then they have no owner.";
