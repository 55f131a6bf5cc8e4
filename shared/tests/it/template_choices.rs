//! The deliberate choices a scanner flags (checkov, `scripts/checkov.sh`, which fails on any
//! check not skipped): each skip in `template.yaml` (a resource's `Metadata.checkov.skip`)
//! carries a one-line reason, the same wherever that check is skipped, and docs/security.md's
//! "Choices we made" states each check once with that reason.

use std::collections::BTreeMap;

use koe_testkit::template::{doc_section, load_yaml};

/// Every skipped check with its reason (the same for every resource), from the template.
fn annotated() -> BTreeMap<String, String> {
    let template = load_yaml("template.yaml");
    let mut reasons: BTreeMap<String, String> = BTreeMap::new();
    for (id, resource) in template["Resources"].as_mapping().unwrap() {
        let id = id.as_str().unwrap();
        for skip in resource["Metadata"]["checkov"]["skip"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            let check = skip["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{id}: a skip's id"));
            let reason = skip["comment"]
                .as_str()
                .unwrap_or_else(|| panic!("{id}: {check} is skipped without a reason"));
            assert!(
                !reason.trim().is_empty() && !reason.contains('\n'),
                "{id}: {check}'s reason is one line"
            );
            let said = reasons.entry(check.to_owned()).or_insert(reason.to_owned());
            assert_eq!(said, reason, "{id}: {check} has one reason everywhere");
        }
    }
    reasons
}

/// The rows of docs/security.md's "Choices we made": check → reason.
fn documented() -> BTreeMap<String, String> {
    let section = doc_section("security.md", "Choices we made");
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| CKV_")) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 2, "{line}");
        let check = cells[0].trim().to_owned();
        let reason = cells[1].trim().to_owned();
        assert!(rows.insert(check, reason).is_none(), "{line}: said twice");
    }
    rows
}

#[test]
fn each_skipped_check_has_one_reason_and_security_md_says_it_once() {
    let annotated = annotated();
    assert!(annotated.len() >= 5, "the template's choices were found");
    assert_eq!(
        annotated,
        documented(),
        "template.yaml's checkov skips (left) and docs/security.md's \"Choices we made\" (right)"
    );
}
