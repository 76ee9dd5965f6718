//! The five built-in scenarios (scenarios/*.toml), embedded in the binary so `vramdoc list`
//! and `vramdoc replay stray-cuda0` work from any directory.

use super::{parse_scenario, Scenario, ScenarioError};

/// `(id, TOML text)` of every built-in scenario, in FAILURES.md order.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "stray-cuda0",
        include_str!("../../scenarios/stray-cuda0.toml"),
    ),
    (
        "multi-size-oom",
        include_str!("../../scenarios/multi-size-oom.toml"),
    ),
    (
        "sharded-release",
        include_str!("../../scenarios/sharded-release.toml"),
    ),
    (
        "double-load",
        include_str!("../../scenarios/double-load.toml"),
    ),
    (
        "overcommit",
        include_str!("../../scenarios/overcommit.toml"),
    ),
];

/// Parse a built-in scenario by id (`None`: no such id).
pub fn get(id: &str) -> Option<Result<Scenario, ScenarioError>> {
    BUILTIN
        .iter()
        .find(|(k, _)| *k == id)
        .map(|(k, text)| parse_scenario(&format!("scenarios/{k}.toml"), text))
}

/// Every built-in scenario, parsed.
pub fn all() -> Result<Vec<Scenario>, ScenarioError> {
    BUILTIN
        .iter()
        .map(|(k, text)| parse_scenario(&format!("scenarios/{k}.toml"), text))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_builtin_parses_and_ids_match() {
        for s in super::all().unwrap() {
            assert!(super::BUILTIN.iter().any(|(k, _)| *k == s.id));
            assert!(
                s.variants.iter().any(|v| v.name == "bug"),
                "{} has a bug variant",
                s.id
            );
            assert!(s.variants.len() >= 2, "{} has a fix", s.id);
        }
    }
}
