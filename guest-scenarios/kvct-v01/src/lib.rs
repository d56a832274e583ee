//! The `kv-cache-tester-v0.1` scenario component: the legacy policy of `policy::kvct` exported through
//! the WIT world `agentx:scenario@0.1.0`. All logic and its tests live in the policy crate.

policy::export_scenario!(policy::kvct::Kvct);
