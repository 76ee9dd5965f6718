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
    }
}

impl RunErrorKind {
    /// An allocation failure (as opposed to a process failing).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            RunErrorKind::CudaOom
                | RunErrorKind::CudaErrorOom
                | RunErrorKind::VllmFreeMemory
                | RunErrorKind::VllmNoCacheBlocks
                | RunErrorKind::VllmKvCache
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
}
