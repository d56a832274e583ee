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
pub fn start_turn(k: Option<u32>, num_turns: u32) -> Result<(), String> {
    match k {
        Some(k) if k >= num_turns => Err(format!(
            "start turn {k} is outside a trajectory of {num_turns} turns"
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
    for (k, t) in starts.iter().zip(trajectories) {
        start_turn(*k, t.num_turns)?;
    }
    Ok(())
}

/// The delay before a turn, seconds: finite, non-negative and at most a year (a longer one is refused,
/// not left to overflow a timer deadline).
pub fn turn_delay(d: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELAY_S).contains(&d) {
        Ok(d)
    } else {
        Err(format!("a delay of {d} s"))
    }
}

/// The end-to-start delay of a session-tree turn, milliseconds: finite, non-negative and at most
/// [`MAX_DELAY_S`].
pub(crate) fn tree_turn_delay(ms: f64) -> Result<f64, String> {
    if (0.0..=MAX_DELAY_S * 1000.0).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!("a delay of {ms} ms"))
    }
}

/// A lane's start in a tree: at least one stream, each index in range and listed once, each next
/// turn inside its stream, the warm turn the one before it, offsets and leads finite and
/// non-negative, branch indices in range, and t* finite when given.
pub(crate) fn tree_start(
    st: &super::types_v2::TreeStart,
    tree: &super::types_v2::Tree,
) -> Result<(), String> {
    if st.streams.is_empty() {
        return Err("a start with no stream".into());
    }
    if st.t_star_ms.is_some_and(|t| !t.is_finite()) {
        return Err(format!("t* {:?} is not a finite time", st.t_star_ms));
    }
    let mut seen = std::collections::HashSet::new();
    for s in &st.streams {
        let Some(stream) = tree.streams.get(s.index as usize) else {
            return Err(format!(
                "stream {} of a tree of {} streams",
                s.index,
                tree.streams.len()
            ));
        };
        let id = &stream.conversation_id;
        if !seen.insert(s.index) {
            return Err(format!("stream {id} listed twice"));
        }
        let n = stream.turn_ts_ms.len() as u32;
        if s.next_turn >= n {
            return Err(format!("{id}: next turn {} of {n} turns", s.next_turn));
        }
        if s.warm_turn != s.next_turn.checked_sub(1) {
            return Err(format!(
                "{id}: warm turn {:?} is not the one before next turn {}",
                s.warm_turn, s.next_turn
            ));
        }
        for (what, x) in [("offset", s.offset_ms), ("lead", s.lead_ms)] {
            if !(0.0..=MAX_DELAY_S * 1000.0).contains(&x) {
                return Err(format!("{id}: {what} of {x} ms"));
            }
        }
        if s.branch.is_some_and(|b| b as usize >= tree.branches.len()) {
            return Err(format!(
                "{id}: branch {:?} of {}",
                s.branch,
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
    for r in resolved {
        if !validity.contains(r) {
            validity.push(r.clone());
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
