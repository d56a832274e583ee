//! Reading and writing a list of settings by name, the one rule every list of settings follows (the
//! flags the host hands to `resolve`, the configuration a scenario resolved): the last entry that
//! names a setting is its value, as a flag given twice means its last value.

use crate::types::{Resolved, Setting, Value};
use crate::ReplaySetting;

/// Whether a component decides aiperf Agent Graph IR replays (`run --format graph-ir`): its
/// `describe` lists the `open-loop-replay` knob, as `graph-ir` does and no session scenario does.
pub fn decides_graph_replays(info: &crate::types::Info) -> bool {
    info.knobs
        .iter()
        .any(|knob| knob.name == ReplaySetting::OpenLoopReplay.name())
}

/// The entry of `settings` that decides `name`: the last one that names it.
pub fn last_named<'a>(settings: &'a [Setting], name: &str) -> Option<&'a Setting> {
    settings.iter().rev().find(|setting| setting.name == name)
}

/// `settings` with `name` set to `value` as if given explicitly, every earlier entry for it gone.
pub fn set_explicit(settings: &mut Vec<Setting>, name: ReplaySetting, value: Value) {
    settings.retain(|setting| setting.name != name.name());
    settings.push(Setting {
        name: name.name().to_string(),
        value,
        explicit: true,
    });
}

impl Resolved {
    /// The value the scenario resolved `name` to (`absent` included), or `None` when its answer
    /// does not name it.
    pub fn setting(&self, name: ReplaySetting) -> Option<&Value> {
        last_named(&self.settings, name.name()).map(|setting| &setting.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(name: &str, value: i64) -> Setting {
        Setting {
            name: name.to_string(),
            value: Value::Integer(value),
            explicit: true,
        }
    }

    #[test]
    fn the_last_entry_decides_and_setting_replaces_every_earlier_one() {
        let mut settings = vec![
            given("concurrency", 4),
            given("random-seed", 1),
            given("concurrency", 8),
        ];
        assert_eq!(
            last_named(&settings, "concurrency").map(|s| &s.value),
            Some(&Value::Integer(8))
        );
        assert!(last_named(&settings, "benchmark-duration").is_none());
        set_explicit(
            &mut settings,
            ReplaySetting::Concurrency,
            Value::Integer(16),
        );
        assert_eq!(settings.len(), 2);
        let resolved = Resolved {
            settings,
            seed: 7,
            seed_drawn: false,
            warnings: Vec::new(),
            invalid_reasons: Vec::new(),
        };
        assert_eq!(
            resolved.setting(ReplaySetting::Concurrency),
            Some(&Value::Integer(16))
        );
        assert_eq!(
            resolved.setting(ReplaySetting::RandomSeed),
            Some(&Value::Integer(1))
        );
    }
}
