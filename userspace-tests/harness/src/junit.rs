//! JUnit XML of a validation run (`nvpeer validate --junit FILE`), written with quick-xml: one
//! `<testcase>` per case, `<failure>` with the probable cause (its `type` the fault code), `<skipped>` for skipped cases and
//! for cases a failed prerequisite kept from running, and the environment as `<properties>`.

use crate::report::{CaseResult, Status};
use quick_xml::events::BytesText;
use quick_xml::Writer;
use std::io;

/// Renders the run as a JUnit XML document.
pub fn render(
    suite: &str,
    cases: &[CaseResult],
    not_run: &[(String, String)],
    properties: &[(String, String)],
) -> io::Result<Vec<u8>> {
    let failures = cases.iter().filter(|c| c.status == Status::Fail).count();
    let skipped = cases.iter().filter(|c| c.status == Status::Skip).count() + not_run.len();
    let secs: u64 = cases.iter().map(|c| c.duration_ms).sum();
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(quick_xml::events::Event::Decl(
        quick_xml::events::BytesDecl::new("1.0", Some("UTF-8"), None),
    ))?;
    w.create_element("testsuites").write_inner_content(|w| {
        w.create_element("testsuite")
            .with_attribute(("name", suite))
            .with_attribute(("tests", (cases.len() + not_run.len()).to_string().as_str()))
            .with_attribute(("failures", failures.to_string().as_str()))
            .with_attribute(("errors", "0"))
            .with_attribute(("skipped", skipped.to_string().as_str()))
            .with_attribute(("time", seconds(secs).as_str()))
            .write_inner_content(|w| {
                w.create_element("properties").write_inner_content(|w| {
                    for (k, v) in properties {
                        w.create_element("property")
                            .with_attribute(("name", k.as_str()))
                            .with_attribute(("value", v.as_str()))
                            .write_empty()?;
                    }
                    Ok(())
                })?;
                for c in cases {
                    case(w, suite, c)?;
                }
                for (name, why) in not_run {
                    w.create_element("testcase")
                        .with_attribute(("name", name.as_str()))
                        .with_attribute(("classname", suite))
                        .write_inner_content(|w| {
                            w.create_element("skipped")
                                .with_attribute(("message", why.as_str()))
                                .write_empty()?;
                            Ok(())
                        })?;
                }
                Ok(())
            })?;
        Ok(())
    })?;
    let mut out = w.into_inner();
    out.push(b'\n');
    Ok(out)
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn case(w: &mut Writer<Vec<u8>>, suite: &str, c: &CaseResult) -> io::Result<()> {
    let e = w
        .create_element("testcase")
        .with_attribute(("name", c.name.as_str()))
        .with_attribute(("classname", suite))
        .with_attribute(("time", seconds(c.duration_ms).as_str()));
    match c.status {
        Status::Pass => {
            e.write_inner_content(|w| {
                w.create_element("system-out")
                    .write_text_content(BytesText::new(&c.detail))?;
                Ok(())
            })?;
        }
        Status::Fail => {
            let cause = c.cause.as_deref().unwrap_or("");
            e.write_inner_content(|w| {
                let mut f = w
                    .create_element("failure")
                    .with_attribute(("message", cause));
                if let Some(code) = &c.code {
                    f = f.with_attribute(("type", code.as_str()));
                }
                f.write_text_content(BytesText::new(&c.detail))?;
                Ok(())
            })?;
        }
        Status::Skip => {
            e.write_inner_content(|w| {
                w.create_element("skipped")
                    .with_attribute(("message", c.detail.as_str()))
                    .write_empty()?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_testcase_per_case_with_escaping() {
        let cases = vec![
            CaseResult::pass("reg.sizes[ibv_reg_mr]", "14 sizes"),
            CaseResult::fail(
                "xfer.write",
                "mismatch at byte 3 <&>",
                "payload \"corrupted\"",
            ),
            CaseResult::skip("inval.free-idle", "host memory"),
        ];
        let not_run = vec![(
            "inval.free-inflight".to_string(),
            "not run: cap.memory failed".to_string(),
        )];
        let props = vec![("kernel".to_string(), "6.12 <x>".to_string())];
        let x = String::from_utf8(render("nvpeer validate", &cases, &not_run, &props).unwrap())
            .unwrap();
        assert!(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
        assert!(
            x.contains(r#"tests="4" failures="1" errors="0" skipped="2""#),
            "{x}"
        );
        assert!(x.contains(r#"<testcase name="reg.sizes[ibv_reg_mr]""#));
        // The fault code of the case's family is the failure's type (docs/operations.md).
        assert!(x.contains(r#"<failure message="payload &quot;corrupted&quot;" type="NVP-V013">mismatch at byte 3 &lt;&amp;&gt;</failure>"#), "{x}");
        assert!(x.contains(r#"<skipped message="not run: cap.memory failed"/>"#));
        assert!(
            x.contains(r#"<property name="kernel" value="6.12 &lt;x&gt;"/>"#),
            "{x}"
        );
        assert_eq!(x.matches("<testcase ").count(), 4);
    }
}
