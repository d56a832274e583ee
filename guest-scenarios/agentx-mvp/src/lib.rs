//! The `inferencex-agentx-mvp` scenario component: the policy of `policy::mvp` exported through the
//! WIT world `agentx:scenario@0.1.0`. All logic and its tests live in the policy crate.

policy::export_scenario!(policy::mvp::Mvp);
