//! The run manifest reader of `agentx-host replay` (`agentx::cli::run::RecordedRun`): arbitrary
//! text as a `run_manifest.json`, then the recorded command line through the CLI parser. Checks no
//! panic and that the inputs the manifest pins are the ones the rerun gets.
#![no_main]

use agentx::cli::run::RecordedRun;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let recorded = match RecordedRun::parse(&text) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    match recorded.run_args() {
        Ok(a) => {
            assert_eq!(a.random_seed, Some(recorded.seed));
            assert_eq!(a.run_id.as_deref(), Some(recorded.run_id.as_str()));
            assert_eq!(
                a.expect_scenario_sha256.as_deref(),
                Some(recorded.scenario_sha256.as_str())
            );
            assert_eq!(a.expect_dataset_key, recorded.dataset_key);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
