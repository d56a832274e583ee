//! What a scenario decides beyond its settings ([`Decisions`], with what a component of an earlier
//! world stands for), the settings a 0.3.0 component must answer ([`super::REPLAY_SETTINGS`]), and the
//! coverage its validity sees ([`TreeCoverage`]).

use super::World;

/// What the assistant text of a request's earlier turns is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssistantText {
    /// Synthesized to the length the trace recorded for those turns.
    Recorded,
    /// The server's own replies to those turns in this run.
    Live,
}

/// How a turn's prompt is laid out of its hash ids (see `dataset::Tiling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptTiling {
    /// Exactly the recorded input tokens.
    RecordedLength,
    /// As agentx-harness 1.0.12 and aiperf 0.13 lay it out.
    Reference,
}

/// The decisions a 0.3.0 component makes that the earlier worlds leave to the host, with the
/// values a component of an earlier world stands for ([`Decisions::of_world`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decisions {
    /// The assistant text; `None`: the host's flag and environment decide (0.1.0).
    pub assistant_text: Option<AssistantText>,
    /// The prompt tiling.
    pub prompt_tiling: PromptTiling,
    /// `X-Session-Affinity` unless the environment switch says otherwise.
    pub session_affinity_header: bool,
    /// Without `--model`, take the single model `/v1/models` lists.
    pub discover_model: bool,
    /// The warmup rows' `phase_name` in the exports; `None`: no name.
    pub warmup_phase_name: Option<String>,
    /// The component answered every replay setting ([`super::REPLAY_SETTINGS`]); the host then has no
    /// default of its own for them.
    pub decides_settings: bool,
}

impl Decisions {
    /// What a component of `world` stands for, 0.3.0 aside (its rules say): 0.1.0 leaves the
    /// assistant text to the host; 0.2.0 replays session trees with the recorded text, as aiperf
    /// 0.13 does (docs/specs/session-trees.md#turn-content-and-delay); both lay prompts out to the recorded length; both send `X-Session-Affinity` as aiperf 0.13 does, need
    /// `--model`, and name the warmup rows `agentic.warmup` as aiperf 0.13 does.
    pub fn of_world(world: World) -> Decisions {
        Decisions {
            assistant_text: (world != World::V0_1).then_some(AssistantText::Recorded),
            prompt_tiling: PromptTiling::RecordedLength,
            session_affinity_header: true,
            discover_model: false,
            warmup_phase_name: Some("agentic.warmup".to_string()),
            decides_settings: false,
        }
    }
}

/// The profiling phase's configured seconds and the shares of it the TTFT, ITL and streamed
/// content timelines cover (none when they could not be computed).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TreeCoverage {
    /// The profiling phase's configured length, in seconds.
    pub profiling_seconds: f64,
    /// The share (0 to 1) of the phase the TTFT timeline covers; `None` when it could not be
    /// computed.
    pub ttft: Option<f64>,
    /// The share (0 to 1) of the phase the inter-token-latency timeline covers; `None` when it
    /// could not be computed.
    pub itl: Option<f64>,
    /// The share (0 to 1) of the phase the last streamed content covers, cancelled streams
    /// included; `None` when it could not be computed. Only a 0.3.0 component sees it.
    pub content: Option<f64>,
}
