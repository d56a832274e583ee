//! The names of the settings the host hands to a scenario and reads back from what it resolved, each
//! spelled once ([`ReplaySetting`]), and the ones a 0.3.0 component must decide
//! ([`REPLAY_SETTINGS`], the list `wit/v0.3/scenario.wit` documents and the harness component answers).

/// Defines [`ReplaySetting`] from `Variant = "wit-name"` rows.
macro_rules! replay_settings {
    ($($variant:ident = $name:literal,)*) => {
        /// A setting the host and a scenario exchange, by its name in the WIT worlds (the aiperf flag
        /// without its dashes).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ReplaySetting {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl ReplaySetting {
            /// Every setting, in the order of this table.
            #[cfg(test)]
            pub(crate) const ALL: &'static [ReplaySetting] = &[$(ReplaySetting::$variant,)*];

            /// The setting's name in the WIT worlds.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ReplaySetting::$variant => $name,)*
                }
            }
        }
    };
}

replay_settings! {
    Concurrency = "concurrency",
    BenchmarkDuration = "benchmark-duration",
    BenchmarkGracePeriod = "benchmark-grace-period",
    TrajectoryStartMinRatio = "trajectory-start-min-ratio",
    TrajectoryStartMaxRatio = "trajectory-start-max-ratio",
    CacheBust = "cache-bust",
    InterTurnDelayCapSeconds = "inter-turn-delay-cap-seconds",
    UseThinkTimeOnly = "use-think-time-only",
    IgnoreTraceDelays = "ignore-trace-delays",
    IgnoreEos = "ignore-eos",
    UnsafeOverride = "unsafe-override",
    ContextOverflowRateLimit = "context-overflow-rate-limit",
    FailedRequestThreshold = "failed-request-threshold",
    WarmupRequestsPerLane = "warmup-requests-per-lane",
    AgenticCacheWarmupDuration = "agentic-cache-warmup-duration",
    WarmupGracePeriod = "warmup-grace-period",
    TraceIdleGapCapSeconds = "trace-idle-gap-cap-seconds",
    SystemIdleGapCapSeconds = "system-idle-gap-cap-seconds",
    BurstPhaseStarts = "burst-phase-starts",
    NumDatasetEntries = "num-dataset-entries",
    SliceDuration = "slice-duration",
    UseServerTokenCount = "use-server-token-count",
    StatsInterval = "stats-interval",
    ArrivalPattern = "arrival-pattern",
    ContextOverflowSubstrings = "context-overflow-substrings",
    UiRealtimeMetricsEnabled = "ui-realtime-metrics-enabled",
    DatasetConfigurationTimeout = "dataset-configuration-timeout",
    ServiceProfileConfigureTimeout = "service-profile-configure-timeout",
    FixedSchedule = "fixed-schedule",
    HttpTcpUserTimeout = "http-tcp-user-timeout",
    Loader = "loader",
    PublicDataset = "public-dataset",
    RandomSeed = "random-seed",
    RequestRate = "request-rate",
    RequestRateRampDuration = "request-rate-ramp-duration",
    SessionArrivalPattern = "session-arrival-pattern",
    SessionArrivalRate = "session-arrival-rate",
    SessionArrivalSmoothness = "session-arrival-smoothness",
    SynthesisMaxIsl = "synthesis-max-isl",
    UserCentricRate = "user-centric-rate",
    Wire = "wire",
    ReasoningInHistory = "reasoning-in-history",
    RequestCount = "request-count",
    OpenLoopReplay = "open-loop-replay",
    ReplaySpeedup = "replay-speedup",
}

impl std::fmt::Display for ReplaySetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings that shape a replay, which a 0.3.0 component must decide (`wit/v0.3`).
pub const REPLAY_SETTINGS: [ReplaySetting; 23] = [
    ReplaySetting::Concurrency,
    ReplaySetting::BenchmarkDuration,
    ReplaySetting::BenchmarkGracePeriod,
    ReplaySetting::TrajectoryStartMinRatio,
    ReplaySetting::TrajectoryStartMaxRatio,
    ReplaySetting::CacheBust,
    ReplaySetting::InterTurnDelayCapSeconds,
    ReplaySetting::UseThinkTimeOnly,
    ReplaySetting::IgnoreTraceDelays,
    ReplaySetting::IgnoreEos,
    ReplaySetting::UnsafeOverride,
    ReplaySetting::ContextOverflowRateLimit,
    ReplaySetting::FailedRequestThreshold,
    ReplaySetting::WarmupRequestsPerLane,
    ReplaySetting::AgenticCacheWarmupDuration,
    ReplaySetting::WarmupGracePeriod,
    ReplaySetting::TraceIdleGapCapSeconds,
    ReplaySetting::SystemIdleGapCapSeconds,
    ReplaySetting::BurstPhaseStarts,
    ReplaySetting::NumDatasetEntries,
    ReplaySetting::SliceDuration,
    ReplaySetting::UseServerTokenCount,
    ReplaySetting::StatsInterval,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct() {
        for (i, setting) in ReplaySetting::ALL.iter().enumerate() {
            assert!(!ReplaySetting::ALL[..i]
                .iter()
                .any(|s| s.name() == setting.name()));
        }
    }

    /// The harness component answers exactly the host's list: the guest's own copy of the names
    /// (`guest-scenarios/harness/src/lib.rs`, built into the component) is the same list.
    #[test]
    fn the_guest_list_is_the_host_list() {
        let guest = include_str!("../../../guest-scenarios/harness/src/lib.rs");
        let start = guest
            .find("pub const REPLAY_SETTINGS")
            .expect("the guest's list");
        let end = start + guest[start..].find("];").expect("the list's end");
        let names: Vec<&str> = guest[start..end].split('"').skip(1).step_by(2).collect();
        let host: Vec<&str> = REPLAY_SETTINGS.iter().map(|s| s.name()).collect();
        assert_eq!(names, host);
    }
}
