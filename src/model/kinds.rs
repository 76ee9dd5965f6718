//! The kinds of what a timeline records — markers, error lines of a `run`, failed steps of a
//! replay — as enums. Each is written as the same kebab-case string it always was (the JSON
//! report, the JSONL sample stream and docs/report.schema.json, where they are plain
//! strings); a value this version does not know, read from a report another version wrote,
//! is kept as `Other`. Producers (the recorder, the stderr parser, the replay engine) and the
//! rules in `diagnose/` match on the variants, never on text.

use std::borrow::Cow;
use std::fmt;

/// An enum written as a string: `as_str`, `Display`, `From<&str>` (unknown text: `Other`),
/// serde as that string, and the JSON Schema of a string.
macro_rules! string_kind {
    ($(#[$meta:meta])* pub enum $name:ident {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A kind this version does not know (read from a report written by another).
            Other(String),
        }

        impl $name {
            /// The string the report and the stream use.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($text => Self::$variant,)*
                    other => Self::Other(other.to_string()),
                }
            }
        }

        string_serde!($name);
    };
}

/// For a type with `as_str(&self) -> &str` and `From<&str>` (which never fails): `Display`,
/// serde as that string, and the JSON Schema of a string (so the report's schema is the same
/// as when the field was a `String`).
macro_rules! string_serde {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                Ok(Self::from(s.as_ref()))
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                <String as schemars::JsonSchema>::inline_schema()
            }
            fn schema_name() -> Cow<'static, str> {
                <String as schemars::JsonSchema>::schema_name()
            }
            fn schema_id() -> Cow<'static, str> {
                <String as schemars::JsonSchema>::schema_id()
            }
            fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <String as schemars::JsonSchema>::json_schema(g)
            }
        }
    };
}

string_kind! {
    /// What a timeline marker stands for. The rules read `step`, `marker` and `release`
    /// (phases, release points) and `end`; the others are shown.
    pub enum MarkerKind {
        /// `run`: the command started.
        Start = "start",
        /// A replay step started.
        Step = "step",
        /// A replay step ended (a phase boundary for the rules; not shown in reports).
        StepEnd = "step-end",
        /// `vramdoc mark TEXT` (or a line of `$VRAMDOC_MARKERS`).
        Marker = "marker",
        /// The job says what it loaded has been released (drives `not-released`).
        Release = "release",
        /// An out-of-memory error.
        Oom = "oom",
        /// Another error.
        Error = "error",
        /// The job (or the worker) was killed by a signal.
        Killed = "killed",
        /// `run`: a signal forwarded to the command, or a terminal's Ctrl-C.
        Signal = "signal",
        /// `run`: the command exited.
        Exit = "exit",
        /// Replay: the worker is gone.
        End = "end",
        /// Replay: the worker started, or NVML's PID for it was found.
        Worker = "worker",
        /// Replay: a neighbour process holds its memory.
        Neighbour = "neighbour",
        /// Replay: stopped by a signal.
        Interrupted = "interrupted",
        /// Replay: the worker stopped answering (`--step-timeout`).
        Timeout = "timeout",
    }
}

impl MarkerKind {
    /// A failure marker (drawn as such by the charts).
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            MarkerKind::Oom | MarkerKind::Error | MarkerKind::Killed
        )
    }
}

string_kind! {
    /// What an error line of a `run` was recognised as (or how the command died).
    pub enum RunErrorKind {
        /// PyTorch: `CUDA out of memory. Tried to allocate …`, `torch.OutOfMemoryError`.
        CudaOom = "cuda-oom",
        /// The driver: `CUDA error: out of memory`, `CUDA_ERROR_OUT_OF_MEMORY`.
        CudaErrorOom = "cuda-error-oom",
        /// vLLM: free memory on start-up below `gpu_memory_utilization`.
        VllmFreeMemory = "vllm-free-memory",
        /// vLLM: no memory left for the KV cache blocks.
        VllmNoCacheBlocks = "vllm-no-cache-blocks",
        /// vLLM: the KV cache cannot hold the model's max sequence length.
        VllmKvCache = "vllm-kv-cache",
        /// torchrun: `ChildFailedError`.
        ChildFailed = "child-failed",
        /// torchrun: one entry of its failure table (`exitcode : -9`).
        ChildExit = "child-exit",
        /// The command was killed by a signal.
        Killed = "killed",
        /// NCCL: `NCCL WARN Cuda failure 'out of memory'` (its buffers could not be allocated).
        NcclOom = "nccl-oom",
        /// cuBLAS: `CUBLAS_STATUS_ALLOC_FAILED` (its handle or workspace could not be allocated).
        CublasAllocFailed = "cublas-alloc-failed",
        /// JAX/XLA: `RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes`.
        JaxOom = "jax-oom",
        /// PyTorch's NCCL watchdog: `Watchdog caught collective operation timeout` (it then
        /// aborts the process: SIGABRT). Not a memory failure.
        NcclWatchdog = "nccl-watchdog",
        /// `CUDA error: unknown error`: how an allocation failure inside an over-committed
        /// budget showed up for WeClone on vLLM (shared FAILURES.md #5).
        CudaUnknownError = "cuda-unknown-error",
        /// PyTorch: `DataLoader worker (pid N) is killed by signal: Killed.` (a worker process
        /// of the job died of that signal; SIGKILL is most often the host's OOM killer).
        WorkerKilled = "worker-killed",
        /// TensorFlow's BFC allocator: `ResourceExhaustedError: OOM when allocating tensor`.
        TfOom = "tf-oom",
        /// llama.cpp / ggml (and Ollama): `cudaMalloc failed: out of memory`, `failed to
        /// allocate CUDA0 buffer`.
        GgmlOom = "ggml-oom",
        /// TensorRT: `Cuda Runtime (out of memory)`, `Error Code 2: OutOfMemory`.
        TensorRtOom = "tensorrt-oom",
        /// SGLang: `Not enough memory. Please try to increase --mem-fraction-static.` (the KV
        /// cache pool does not fit after the weights).
        SglangNoMemory = "sglang-not-enough-memory",
        /// cuDNN: `CUDNN_STATUS_ALLOC_FAILED`.
        CudnnAllocFailed = "cudnn-alloc-failed",
        /// A training loop reporting an out-of-memory error it caught (fairseq's `attempting
        /// to recover from OOM`).
        FrameworkOom = "framework-oom",
        /// A CUDA failure that is not an allocation failure (illegal address, device-side
        /// assert, driver too old, NCCL's CUDA check on another error).
        CudaFault = "cuda-fault",
        /// PaddlePaddle: `ResourceExhaustedError: Out of memory error on GPU N. Cannot allocate
        /// X memory on GPU N, … available memory is only F.`
        PaddleOom = "paddle-oom",
        /// Hugging Face text-generation-inference: `Not enough memory to handle N prefill
        /// tokens` (its warm-up found no room for a full prefill batch).
        TgiOom = "tgi-oom",
        /// ONNX Runtime's BFC arena: `Failed to allocate memory for requested buffer of size N`.
        OnnxRuntimeOom = "onnxruntime-oom",
        /// MXNet's pooled storage manager: `cudaMalloc retry failed: out of memory`.
        MxnetOom = "mxnet-oom",
    }
}

impl RunErrorKind {
    /// The timeline marker a line of this kind places: `oom` for an allocation failure,
    /// `error` for the rest (a watchdog timeout, a killed worker, torchrun's table).
    pub fn marker(&self) -> MarkerKind {
        if self.is_out_of_memory() {
            MarkerKind::Oom
        } else {
            MarkerKind::Error
        }
    }

    /// An allocation failure (as opposed to a process failing).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            RunErrorKind::CudaOom
                | RunErrorKind::CudaErrorOom
                | RunErrorKind::VllmFreeMemory
                | RunErrorKind::VllmNoCacheBlocks
                | RunErrorKind::VllmKvCache
                | RunErrorKind::NcclOom
                | RunErrorKind::CublasAllocFailed
                | RunErrorKind::JaxOom
                | RunErrorKind::TfOom
                | RunErrorKind::GgmlOom
                | RunErrorKind::TensorRtOom
                | RunErrorKind::CudnnAllocFailed
                | RunErrorKind::FrameworkOom
                | RunErrorKind::SglangNoMemory
                | RunErrorKind::PaddleOom
                | RunErrorKind::TgiOom
                | RunErrorKind::OnnxRuntimeOom
                | RunErrorKind::MxnetOom
        )
    }
}

string_kind! {
    /// Why a replay step (or the worker) failed.
    pub enum StepErrorKind {
        /// An allocation failed.
        OutOfMemory = "out-of-memory",
        /// The device fell off the bus.
        DeviceLost = "device-lost",
        /// The worker could not open the GPU driver (the replay stops: exit 3).
        Environment = "environment",
        /// Killed by a signal.
        Killed = "killed",
        /// Stopped by a signal sent to vramdoc; results are partial.
        Interrupted = "interrupted",
        /// No answer from the worker for `--step-timeout`.
        Timeout = "timeout",
        /// Anything else.
        Error = "error",
    }
}

/// How a replay step ended, as [`StepRecord::status`](super::StepRecord::status) records it:
/// written `running`, `ok`, or the [`StepErrorKind`] it failed with (`out-of-memory`,
/// `killed`, ...). Any other text read from a report is a failure of that (unknown) kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StepStatus {
    /// Started and not yet ended.
    Running,
    /// Ended without error.
    Ok,
    /// Ended with this error (or killed, interrupted, timed out).
    Failed(StepErrorKind),
}

impl StepStatus {
    /// The string the report uses.
    pub fn as_str(&self) -> &str {
        match self {
            StepStatus::Running => "running",
            StepStatus::Ok => "ok",
            StepStatus::Failed(kind) => kind.as_str(),
        }
    }

    /// The kind of error the step failed with, when it failed.
    pub fn failure(&self) -> Option<&StepErrorKind> {
        match self {
            StepStatus::Failed(kind) => Some(kind),
            _ => None,
        }
    }
}

impl From<&str> for StepStatus {
    fn from(s: &str) -> Self {
        match s {
            "running" => StepStatus::Running,
            "ok" => StepStatus::Ok,
            other => StepStatus::Failed(StepErrorKind::from(other)),
        }
    }
}

string_serde!(StepStatus);

string_kind! {
    /// Which sampling loop a [`SamplingGap`](super::SamplingGap) is in.
    pub enum GapKind {
        /// The fast memory loop.
        Memory = "memory",
        /// The per-process lists (and the process tree), on the slower cadence.
        Processes = "processes",
    }
}

/// Why a [`SamplingGap`](super::SamplingGap) has no data: written `late`, or the failed
/// query's error (one line). Any text other than `late` read from a report is an error.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GapReason {
    /// Rounds came later than twice the period (the sampler was starved).
    Late,
    /// A query failed: its error, one line.
    Failed(String),
}

pub use crate::gpu::lanes::HUNG_GAP_PREFIX;

/// What the error of a query on a lost GPU says (`GpuError::DeviceLost`'s text).
pub const LOST_GAP_MARK: &str = "is lost (fallen off the bus)";

impl GapReason {
    /// Whether the gap was left by an NVML call that did not return in time.
    pub fn is_hung(&self) -> bool {
        matches!(self, GapReason::Failed(e) if e.starts_with(HUNG_GAP_PREFIX))
    }

    /// Whether the gap was left by a GPU the driver reports lost (fallen off the bus:
    /// `NVML_ERROR_GPU_IS_LOST`, written as `device N is lost (fallen off the bus)...`).
    pub fn is_lost(&self) -> bool {
        matches!(self, GapReason::Failed(e)
            if !e.starts_with(HUNG_GAP_PREFIX)
                && (e.contains(LOST_GAP_MARK) || e.contains("GPU_IS_LOST")))
    }

    /// The string the report uses.
    pub fn as_str(&self) -> &str {
        match self {
            GapReason::Late => "late",
            GapReason::Failed(error) => error,
        }
    }
}

impl From<&str> for GapReason {
    fn from(s: &str) -> Self {
        match s {
            "late" => GapReason::Late,
            error => GapReason::Failed(error.to_string()),
        }
    }
}

string_serde!(GapReason);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_written_as_their_strings_and_unknown_ones_kept() {
        assert_eq!(
            serde_json::to_string(&MarkerKind::StepEnd).unwrap(),
            "\"step-end\""
        );
        let k: RunErrorKind = serde_json::from_str("\"vllm-kv-cache\"").unwrap();
        assert_eq!(k, RunErrorKind::VllmKvCache);
        let k: StepErrorKind = serde_json::from_str("\"gpu-on-fire\"").unwrap();
        assert_eq!(k, StepErrorKind::Other("gpu-on-fire".into()));
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"gpu-on-fire\"");
        assert_eq!(MarkerKind::from("release"), MarkerKind::Release);
        assert!(MarkerKind::Oom.is_failure() && !MarkerKind::Step.is_failure());
    }

    #[test]
    fn step_status_and_gaps_are_written_as_their_strings_and_unknown_ones_kept() {
        for (status, text) in [
            (StepStatus::Running, "running"),
            (StepStatus::Ok, "ok"),
            (
                StepStatus::Failed(StepErrorKind::OutOfMemory),
                "out-of-memory",
            ),
            (StepStatus::Failed(StepErrorKind::Timeout), "timeout"),
        ] {
            assert_eq!(
                serde_json::to_string(&status).unwrap(),
                format!("\"{text}\"")
            );
            let back: StepStatus = serde_json::from_str(&format!("\"{text}\"")).unwrap();
            assert_eq!(back, status);
        }
        let old: StepStatus = serde_json::from_str("\"melted\"").unwrap();
        assert_eq!(
            old,
            StepStatus::Failed(StepErrorKind::Other("melted".into()))
        );
        assert_eq!(old.as_str(), "melted");
        assert_eq!(StepStatus::Ok.failure(), None);

        assert_eq!(
            serde_json::to_string(&GapKind::Processes).unwrap(),
            "\"processes\""
        );
        let k: GapKind = serde_json::from_str("\"tree\"").unwrap();
        assert_eq!(k, GapKind::Other("tree".into()));
        let r: GapReason = serde_json::from_str("\"late\"").unwrap();
        assert_eq!(r, GapReason::Late);
        // A lost GPU's query error, as the backends write it, is recognised as lost; a hung
        // call, a late round and another driver error are not.
        let lost = crate::gpu::GpuError::DeviceLost(1).to_string();
        assert!(GapReason::from(lost.as_str()).is_lost(), "{lost}");
        assert!(
            GapReason::from("nvmlDeviceGetMemoryInfo failed: NVML_ERROR_GPU_IS_LOST: x").is_lost()
        );
        assert!(!GapReason::from("hung: no answer from NVML within 1000 ms").is_lost());
        assert!(!GapReason::Late.is_lost());
        assert!(!GapReason::from("nvmlDeviceGetMemoryInfo failed: NVML_ERROR_UNKNOWN").is_lost());
        let r: GapReason = serde_json::from_str("\"device 1 is lost\"").unwrap();
        assert_eq!(r, GapReason::Failed("device 1 is lost".into()));
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"device 1 is lost\"");
    }
}
