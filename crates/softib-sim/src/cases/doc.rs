//! The generated parts of `docs/troubleshooting.md`. The guide's prose is written by hand;
//! each case's figures, criteria, plots and the `--explain`/`--compare` output sit between
//! `<!-- BEGIN GENERATED <slug> ... -->` and `<!-- END GENERATED <slug> -->` and are
//! replaced by `softib cases --doc docs/troubleshooting.md`, which runs the full-size
//! scenarios. The BEGIN marker records a digest of the case's scenario files and quick
//! overrides, so a test can tell that a scenario changed after the guide was generated.

use super::case::{Case, CaseError, Evaluation, Outcome, Scale};
use crate::report::compare::{compare, render as render_compare};
use crate::report::text::render_explain;
use std::fmt::Write;

/// Bumped when the generated block's layout changes, so old blocks count as stale.
const FORMAT: u32 = 1;

/// FNV-1a, 64 bits: a stable digest (no dependency, same on every platform).
fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The digest of a case's inputs: its scenario files (role and text), its quick overrides
/// and the block format.
pub fn digest(case: &Case) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    h = fnv1a(&FORMAT.to_le_bytes(), h);
    h = fnv1a(case.slug.as_bytes(), h);
    for r in case.runs {
        h = fnv1a(r.role.as_bytes(), h);
        h = fnv1a(&[0], h);
        h = fnv1a(r.text.as_bytes(), h);
        h = fnv1a(&[0], h);
    }
    for (k, v) in case.quick {
        h = fnv1a(k.as_bytes(), h);
        h = fnv1a(v.as_bytes(), h);
    }
    format!("{h:016x}")
}

fn begin_marker(slug: &str) -> String {
    format!("<!-- BEGIN GENERATED {slug}")
}

fn end_marker(slug: &str) -> String {
    format!("<!-- END GENERATED {slug} -->")
}

/// The file name of a plot of `case` in the guide's image directory.
pub fn image_name(case: &Case, plot: &str) -> String {
    format!("{}-{plot}.svg", case.slug)
}

/// The generated block of `case` (markers included), from its full-size runs. Plots are
/// referenced as `<image_dir>/<slug>-<name>.svg`.
pub fn block(case: &Case, o: &Outcome, e: &Evaluation, image_dir: &str) -> String {
    let mut b = String::new();
    let _ = writeln!(
        b,
        "{} digest={} (written by `softib cases --doc`; edit the scenarios or the generator, not this block) -->",
        begin_marker(case.slug),
        digest(case)
    );
    let _ = writeln!(b, "Reproduce (from the repository root; `softib` is `cargo run --release -p softib-cli --`):\n");
    let _ = writeln!(b, "```sh");
    for r in case.runs {
        let _ = writeln!(b, "softib sim {} --explain", case.path(r.role));
    }
    let _ = writeln!(
        b,
        "softib sim --compare {} {}",
        case.path(case.runs[0].role),
        case.path(case.runs[1].role)
    );
    let _ = writeln!(b, "```\n");
    let scale = match o.scale {
        Scale::Full => "full-size scenarios",
        Scale::Quick => "QUICK-SIZE scenarios (not for publication)",
    };
    let _ = writeln!(b, "Measured ({scale}, seed as in the files):\n");
    let _ = write!(b, "| |");
    for c in &e.columns {
        let _ = write!(b, " {c} |");
    }
    let _ = write!(b, "\n|---|");
    for _ in &e.columns {
        let _ = write!(b, "---:|");
    }
    let _ = writeln!(b);
    for r in &e.rows {
        let _ = write!(b, "| {} |", r.what);
        for v in &r.values {
            let _ = write!(b, " {v} |");
        }
        let _ = writeln!(b);
    }
    let _ = writeln!(
        b,
        "\nCriteria (asserted at quick size by `crates/softib-sim/tests/field_cases.rs`, at full size by `softib cases`):\n"
    );
    for c in &e.checks {
        let _ = writeln!(
            b,
            "- {} {}: {}",
            if c.holds { "[x]" } else { "[ ] **FAILED**" },
            c.claim,
            c.measured
        );
    }
    for p in &e.plots {
        let _ = writeln!(
            b,
            "\n![{}]({image_dir}/{})",
            p.caption,
            image_name(case, p.name)
        );
    }
    if let Ok(problem) = o.report(case.runs[0].role) {
        let _ = writeln!(
            b,
            "\n`softib sim {} --explain`, the explanation part:\n\n```text\n{}```",
            case.path(case.runs[0].role),
            render_explain(&problem.summary)
        );
    }
    if let (Ok(a), Ok(z)) = (o.report(case.runs[0].role), o.report(case.runs[1].role)) {
        let _ = writeln!(
            b,
            "\n`softib sim --compare` of {} (A) and {} (B):\n\n```text\n{}```",
            case.runs[0].role,
            case.runs[1].role,
            render_compare(&compare(&a.summary, &z.summary))
        );
    }
    let _ = writeln!(b, "{}", end_marker(case.slug));
    b
}

/// `doc` with the block of `case` replaced by `block`. The guide must already hold the
/// case's BEGIN and END markers (that is where the prose wants the figures).
pub fn splice(doc: &str, case: &Case, block: &str) -> Result<String, CaseError> {
    let (start, end) = span(doc, case.slug).ok_or_else(|| {
        CaseError::Doc(format!(
            "the guide has no `{} -->` ... `{}` pair for case {}: add them where its figures belong",
            begin_marker(case.slug),
            end_marker(case.slug),
            case.slug
        ))
    })?;
    Ok(format!("{}{block}{}", &doc[..start], &doc[end..]))
}

/// Byte range of the block of `slug` in `doc`, from its BEGIN marker to the end of the
/// END marker's line.
fn span(doc: &str, slug: &str) -> Option<(usize, usize)> {
    let b = begin_marker(slug);
    let start = doc.match_indices(&b).map(|(i, _)| i).find(|&i| {
        // `<!-- BEGIN GENERATED 01-x` must not match `01-xy`.
        doc[i + b.len()..]
            .chars()
            .next()
            .is_some_and(|c| c == ' ' || c == '-')
    })?;
    let e = end_marker(slug);
    let end_at = doc[start..].find(&e)? + start + e.len();
    let end = doc[end_at..]
        .find('\n')
        .map_or(doc.len(), |n| end_at + n + 1);
    Some((start, end))
}

/// The digest recorded in the guide's block of `slug`, if the block exists.
pub fn stored_digest(doc: &str, slug: &str) -> Option<String> {
    let (start, end) = span(doc, slug)?;
    let line = doc[start..end].lines().next()?;
    let d = line.split("digest=").nth(1)?;
    Some(d.chars().take_while(|c| c.is_ascii_hexdigit()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_replaced_and_dated() {
        let case = &super::super::all()[0];
        let doc = format!(
            "intro\n{} -->\n{}\noutro\n",
            begin_marker(case.slug),
            end_marker(case.slug)
        );
        assert_eq!(stored_digest(&doc, case.slug), None);
        let block = format!(
            "{} digest={} -->\nfigures\n{}\n",
            begin_marker(case.slug),
            digest(case),
            end_marker(case.slug)
        );
        let new = splice(&doc, case, &block).unwrap();
        assert_eq!(new, format!("intro\n{block}outro\n"));
        assert_eq!(stored_digest(&new, case.slug), Some(digest(case)));
        // Splicing again replaces, never duplicates.
        assert_eq!(splice(&new, case, &block).unwrap(), new);
        let e = splice("no markers", case, &block).unwrap_err();
        assert!(e.to_string().contains(case.slug), "{e}");
    }
}
