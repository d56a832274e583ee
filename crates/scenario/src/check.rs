//! The host's checks of what a scenario component answers, as pure functions of the guest's result
//! types: [`super::ScenarioInstance`] applies them to every call, and tests and the fuzz targets
//! apply them to arbitrary answers without a component.
//!
//! A guest is untrusted: anything these functions accept is safe for the host to use as it does
//! (index a trajectory, wait for a delay, write a marker into JSON), whatever the guest returned.

use agentx_dataset::{CacheBust, Placement as PromptPlacement};

use super::types::{Placement, Trajectory};

/// The longest delay before a turn a scenario may ask for, seconds (a year). A longer one, finite
/// but past what a timer deadline can hold, is a contract violation, not a panic in the lane.
const MAX_DELAY_S: f64 = 365.0 * 86_400.0;

/// A start turn must leave at least the start turn itself inside a trajectory of `num_turns`.
pub fn start_turn(start: Option<u32>, num_turns: u32) -> Result<(), String> {
    match start {
        Some(start) if start >= num_turns => Err(format!(
            "start turn {start} is outside a trajectory of {num_turns} turns"
        )),
        _ => Ok(()),
    }
}

/// The answers of `plan-starts`: one per trajectory, each a valid [`start_turn`].
pub fn plan_starts(starts: &[Option<u32>], trajectories: &[Trajectory]) -> Result<(), String> {
    if starts.len() != trajectories.len() {
        return Err(format!(
            "{} answers for {} trajectories",
            starts.len(),
            trajectories.len()
        ));
    }
    for (start, trajectory) in starts.iter().zip(trajectories) {
        start_turn(*start, trajectory.num_turns)?;
    }
    Ok(())
}

/// The delay before a turn, seconds: finite, non-negative and at most a year (a longer one is refused,
/// not left to overflow a timer deadline).
pub fn turn_delay(delay_s: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELAY_S).contains(&delay_s) {
        Ok(delay_s)
    } else {
        Err(format!("a delay of {delay_s} s"))
    }
}

/// The end-to-start delay of a session-tree turn, milliseconds: finite, non-negative and at most
/// [`MAX_DELAY_S`].
pub(crate) fn tree_turn_delay(delay_ms: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELAY_S * 1000.0).contains(&delay_ms) {
        Ok(delay_ms)
    } else {
        Err(format!("a delay of {delay_ms} ms"))
    }
}

/// A lane's start in a tree: at least one stream, each index in range and listed once, each next
/// turn inside its stream, the warm turn the one before it, offsets and leads finite and
/// non-negative, branch indices in range, and t* finite when given.
pub(crate) fn tree_start(
    start: &super::types_v2::TreeStart,
    tree: &super::types_v2::Tree,
) -> Result<(), String> {
    if start.streams.is_empty() {
        return Err("a start with no stream".into());
    }
    if start.t_star_ms.is_some_and(|t| !t.is_finite()) {
        return Err(format!("t* {:?} is not a finite time", start.t_star_ms));
    }
    let mut seen = std::collections::HashSet::new();
    for stream_start in &start.streams {
        let Some(stream) = tree.streams.get(stream_start.index as usize) else {
            return Err(format!(
                "stream {} of a tree of {} streams",
                stream_start.index,
                tree.streams.len()
            ));
        };
        let conversation = &stream.conversation_id;
        if !seen.insert(stream_start.index) {
            return Err(format!("stream {conversation} listed twice"));
        }
        let num_turns = stream.turn_ts_ms.len() as u32;
        let next_turn = stream_start.next_turn;
        if next_turn >= num_turns {
            return Err(format!(
                "{conversation}: next turn {next_turn} of {num_turns} turns"
            ));
        }
        if stream_start.warm_turn != next_turn.checked_sub(1) {
            return Err(format!(
                "{conversation}: warm turn {:?} is not the one before next turn {next_turn}",
                stream_start.warm_turn
            ));
        }
        for (what, value_ms) in [
            ("offset", stream_start.offset_ms),
            ("lead", stream_start.lead_ms),
        ] {
            if !(0.0..=MAX_DELAY_S * 1000.0).contains(&value_ms) {
                return Err(format!("{conversation}: {what} of {value_ms} ms"));
            }
        }
        if stream_start
            .branch
            .is_some_and(|branch| branch as usize >= tree.branches.len())
        {
            return Err(format!(
                "{conversation}: branch {:?} of {}",
                stream_start.branch,
                tree.branches.len()
            ));
        }
    }
    Ok(())
}

/// The marker a session's prompt carries: none for the `none` target or an empty text.
pub fn cache_bust(target: Placement, text: &str) -> Option<CacheBust<'_>> {
    let placement = match target {
        Placement::None => return None,
        Placement::SystemPrefix => PromptPlacement::SystemPrefix,
        Placement::SystemSuffix => PromptPlacement::SystemSuffix,
        Placement::FirstTurnPrefix => PromptPlacement::FirstUserPrefix,
        Placement::FirstTurnSuffix => PromptPlacement::FirstUserSuffix,
    };
    (!text.is_empty()).then_some(CacheBust { placement, text })
}

/// The reasons a run is not a valid submission: `validity`'s answer, then the reasons `resolve`
/// gave before the run that it does not repeat.
pub fn invalid_reasons(mut validity: Vec<String>, resolved: &[String]) -> Vec<String> {
    for reason in resolved {
        if !validity.contains(reason) {
            validity.push(reason.clone());
        }
    }
    validity
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traj(n: u32) -> Trajectory {
        Trajectory {
            trace_id: "t".into(),
            num_turns: n,
            unsendable: vec![],
        }
    }

    #[test]
    fn start_turns() {
        assert!(start_turn(None, 0).is_ok());
        assert!(start_turn(Some(2), 3).is_ok());
        assert!(start_turn(Some(3), 3).is_err());
        assert!(plan_starts(&[Some(0), None], &[traj(1), traj(0)]).is_ok());
        assert!(plan_starts(&[Some(0)], &[traj(1), traj(2)]).is_err());
        assert!(plan_starts(&[Some(0), Some(5)], &[traj(1), traj(2)]).is_err());
    }

    /// Found by the `scenario_results` fuzz target: a finite delay too long for a deadline passed the
    /// check and panicked in the lane (`Duration::from_secs_f64`, `Instant + Duration`).
    #[test]
    fn huge_delay_is_a_contract_violation() {
        assert_eq!(turn_delay(0.0), Ok(0.0));
        assert_eq!(turn_delay(MAX_DELAY_S), Ok(MAX_DELAY_S));
        for d in [
            1e300,
            1.8e19,
            MAX_DELAY_S * 1.01,
            -0.5,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert!(turn_delay(d).is_err(), "{d}");
        }
        let d = turn_delay(MAX_DELAY_S).unwrap();
        let _ = std::time::Instant::now() + std::time::Duration::from_secs_f64(d);
    }

    #[test]
    fn markers_and_reasons() {
        assert!(cache_bust(Placement::None, "x").is_none());
        assert!(cache_bust(Placement::SystemPrefix, "").is_none());
        let b = cache_bust(Placement::FirstTurnSuffix, "m").unwrap();
        assert_eq!(b.placement, PromptPlacement::FirstUserSuffix);
        assert_eq!(
            invalid_reasons(vec!["a".into()], &["a".into(), "b".into()]),
            ["a", "b"]
        );
    }
}
