//! A policy agent's rules (`nagless fix --policy`, whose status file the CLI reads) as series
//! beside the fixes in force: what each rule changed, its trial, its reverts.
//!
//! | metric | type | what |
//! | --- | --- | --- |
//! | `nagless_policy_rule_info` | gauge | always 1, one per rule of the policy in force; labels `rule`, `action`, `state` |
//! | `nagless_policy_rule_connections` | gauge | connections the rule has changed now |
//! | `nagless_policy_rule_workloads` | gauge | processes whose connections the rule has changed now |
//! | `nagless_policy_rule_changes_total` | counter | connections the rule changed since the agent started |
//! | `nagless_policy_rule_reverts_total` | counter | times the rule was taken back (its stalls did not fall by half on trial); label `reason` |
//! | `nagless_policy_rule_stall_rate` | gauge | stalls per second of the rule's connections on trial; label `phase` (`before` it acted, `after`: while it acted) |
//!
//! Every rule has its series from the agent's first status, at zero, so that a query over a
//! rule that changed nothing returns 0, not nothing; a rule gone from the policy loses them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

use super::FloatGauge;

/// A rule as the agent's status file has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolicyRule {
    /// Its name.
    pub rule: String,
    /// What it sets (`TCP_NODELAY`, `delayed ACKs of at most 8 ms`).
    pub action: String,
    /// `in force`, `counting before it acts`, `on trial`, `kept after its trial`, `taken back`.
    pub state: String,
    /// Connections it has changed now.
    pub connections: u64,
    /// Processes whose connections it has changed now.
    pub workloads: u64,
    /// Connections it changed since the agent started.
    pub changes: u64,
    /// Times it was taken back since the agent started.
    pub reverts: u64,
    /// Its stall rate (per second) before it acted, when measured.
    pub before: Option<f64>,
    /// Its stall rate (per second) while it acted on trial, when measured.
    pub after: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct InfoLabels {
    rule: String,
    action: String,
    state: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RevertLabels {
    rule: String,
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    rule: String,
    phase: &'static str,
}

/// Why a rule is taken back (the one signal the agent has).
const REASON: &str = "stalls_did_not_fall";

/// The families.
#[derive(Debug, Clone, Default)]
pub(super) struct PolicyFamilies {
    info: Family<InfoLabels, Gauge>,
    connections: Family<RuleLabels, Gauge>,
    workloads: Family<RuleLabels, Gauge>,
    changes: Family<RuleLabels, Counter>,
    reverts: Family<RevertLabels, Counter>,
    rate: Family<PhaseLabels, FloatGauge>,
    /// The rules the counters have series for.
    counted: Vec<String>,
}

impl PolicyFamilies {
    pub(super) fn register(r: &mut Registry) -> PolicyFamilies {
        let f = PolicyFamilies::default();
        r.register(
            "nagless_policy_rule_info",
            "One series per rule of the policy the node agent (nagless fix --policy) keeps (always 1): its name, what it sets, where its trial is",
            f.info.clone(),
        );
        r.register(
            "nagless_policy_rule_connections",
            "Connections the policy rule has changed now",
            f.connections.clone(),
        );
        r.register(
            "nagless_policy_rule_workloads",
            "Processes whose connections the policy rule has changed now",
            f.workloads.clone(),
        );
        r.register(
            "nagless_policy_rule_changes",
            "Connections the policy rule changed since the agent started",
            f.changes.clone(),
        );
        r.register(
            "nagless_policy_rule_reverts",
            "Times the policy rule was taken back (its connections' stalls did not fall by half while it acted)",
            f.reverts.clone(),
        );
        r.register(
            "nagless_policy_rule_stall_rate",
            "Stalls per second of the policy rule's connections on its trial: before it acted, and while it acted",
            f.rate.clone(),
        );
        f
    }

    /// The rules of the agent's last status, replacing the last list. Counters follow the
    /// agent's own (a lower count is a new agent: the series starts again).
    pub(super) fn set(&mut self, rules: &[PolicyRule]) {
        self.info.clear();
        self.connections.clear();
        self.workloads.clear();
        self.rate.clear();
        for r in rules {
            let l = RuleLabels {
                rule: r.rule.clone(),
            };
            self.info
                .get_or_create(&InfoLabels {
                    rule: r.rule.clone(),
                    action: r.action.clone(),
                    state: r.state.clone(),
                })
                .set(1);
            self.connections.get_or_create(&l).set(r.connections as i64);
            self.workloads.get_or_create(&l).set(r.workloads as i64);
            follow(&self.changes, &l, r.changes);
            let rl = RevertLabels {
                rule: r.rule.clone(),
                reason: REASON,
            };
            follow(&self.reverts, &rl, r.reverts);
            for (phase, v) in [("before", r.before), ("after", r.after)] {
                if let Some(v) = v {
                    self.rate
                        .get_or_create(&PhaseLabels {
                            rule: r.rule.clone(),
                            phase,
                        })
                        .set(v);
                }
            }
        }
        // Rules gone from the policy lose their counters too.
        for rule in std::mem::take(&mut self.counted) {
            if !rules.iter().any(|r| r.rule == rule) {
                self.changes.remove(&RuleLabels { rule: rule.clone() });
                self.reverts.remove(&RevertLabels {
                    rule,
                    reason: REASON,
                });
            }
        }
        self.counted = rules.iter().map(|r| r.rule.clone()).collect();
    }
}

/// Sets a counter to the agent's `count`: increased by the difference, or made again at it
/// when the count went down (a new agent).
fn follow<L>(family: &Family<L, Counter>, labels: &L, count: u64)
where
    L: Clone + Eq + std::hash::Hash,
{
    let now = family.get_or_create(labels).get();
    if count < now {
        family.remove(labels);
    }
    let c = family.get_or_create(labels);
    c.inc_by(count.saturating_sub(c.get()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_has_its_series_and_counters_follow_the_agent() {
        let mut r = Registry::default();
        let mut f = PolicyFamilies::register(&mut r);
        let rule = |changes, reverts, before| PolicyRule {
            rule: "db".into(),
            action: "TCP_NODELAY".into(),
            state: "in force".into(),
            connections: 3,
            workloads: 2,
            changes,
            reverts,
            before,
            after: None,
        };
        f.set(&[rule(5, 0, None)]);
        let text = super::super::encode_registry(&r);
        for want in [
            "nagless_policy_rule_info{rule=\"db\",action=\"TCP_NODELAY\",state=\"in force\"} 1",
            "nagless_policy_rule_connections{rule=\"db\"} 3",
            "nagless_policy_rule_workloads{rule=\"db\"} 2",
            "nagless_policy_rule_changes_total{rule=\"db\"} 5",
            "nagless_policy_rule_reverts_total{rule=\"db\",reason=\"stalls_did_not_fall\"} 0",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        assert!(!text.contains("stall_rate{"), "{text}");
        f.set(&[rule(7, 1, Some(21.5))]);
        let text = super::super::encode_registry(&r);
        assert!(text.contains("changes_total{rule=\"db\"} 7"), "{text}");
        assert!(text.contains("reverts_total{rule=\"db\",reason=\"stalls_did_not_fall\"} 1"));
        assert!(
            text.contains("stall_rate{rule=\"db\",phase=\"before\"} 21.5"),
            "{text}"
        );
        // A new agent counts from 0 again; a rule gone loses its series.
        f.set(&[rule(2, 0, None)]);
        assert!(super::super::encode_registry(&r).contains("changes_total{rule=\"db\"} 2"));
        f.set(&[]);
        let text = super::super::encode_registry(&r);
        assert!(!text.contains("rule=\"db\""), "{text}");
    }
}
