//! SVG plots of a run with `plotters`' SVG backend: bandwidth per flow over time, the share
//! of each sample interval a port spent waiting (PortXmitWait), and receive-buffer
//! occupancy per port. Text is written as SVG `<text>` elements laid out with plotters'
//! built-in size estimate, so no font library or system font is involved, and the output
//! is a pure function of the report.

use super::csv::bin_count;
use super::output::Report;
use plotters::prelude::*;
use softib_fabric::time::{Picos, PS_PER_US};

/// Flows drawn at most (the largest by bytes); the rest are summarised in the caption.
pub const MAX_FLOW_LINES: usize = 12;
/// Ports drawn at most per port plot (the ones that stand out most).
pub const MAX_PORT_LINES: usize = 8;

const SIZE: (u32, u32) = (960, 540);

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 128),
    RGBColor(128, 0, 0),
];

/// One line of a chart: a label and (x, y) points.
pub(crate) struct Line {
    /// Legend text.
    pub(crate) label: String,
    /// Points in x order.
    pub(crate) points: Vec<(f64, f64)>,
}

fn to_us(t: Picos) -> f64 {
    t as f64 / PS_PER_US as f64
}

/// Draws `lines` into an SVG document (x in simulated microseconds from 0 to `x_max`).
pub(crate) fn chart(title: &str, y_label: &str, x_max: f64, lines: &[Line], note: &str) -> String {
    let mut svg = String::new();
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let x_max = if x_max > 0.0 { x_max } else { 1.0 };
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        // Drawing into a string cannot fail for I/O reasons; a layout error only loses the
        // picture, never the run, so errors are ignored here and the caller writes what
        // was drawn.
        let _ = draw(&root, title, y_label, x_max, y_max, lines, note);
        let _ = root.present();
    }
    svg
}

/// Height of the strip under the chart that holds the note, below the x-axis label.
const NOTE_HEIGHT: u32 = 26;
/// Legend rows, pixels apart.
const LEGEND_ROW: i32 = 18;
/// Legend text size.
const LEGEND_FONT: u32 = 13;

/// The width of the legend column right of the chart: room for the longest label (by
/// plotters' estimate of about 7 px per character at the legend's size), within bounds.
fn legend_width(lines: &[Line]) -> u32 {
    if lines.is_empty() {
        return 0;
    }
    let chars = lines
        .iter()
        .map(|l| l.label.chars().count())
        .max()
        .unwrap_or(0) as u32;
    (chars * 7 + 40).clamp(110, 360)
}

/// The chart in the upper left, its legend in a column to its right (so it hides no
/// data however many lines there are) and the note in a strip at the bottom, under the
/// x-axis label.
fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    x_max: f64,
    y_max: f64,
    lines: &[Line],
    note: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (body, footer) = if note.is_empty() {
        (root.clone(), None)
    } else {
        let (body, footer) = root.split_vertically(SIZE.1 - NOTE_HEIGHT);
        (body, Some(footer))
    };
    let (plot, legend) = body.split_horizontally(SIZE.0 - legend_width(lines));
    let mut c = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    c.configure_mesh()
        .x_desc("simulated time (us)")
        .y_desc(y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        c.draw_series(LineSeries::new(
            l.points.iter().copied(),
            color.stroke_width(2),
        ))?;
    }
    // Legend rows start level with the top of the plotting area (below the caption).
    let top = 12 + 22 + 16;
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let y = top + i as i32 * LEGEND_ROW;
        legend.draw(&PathElement::new(
            vec![(4, y), (22, y)],
            color.stroke_width(2),
        ))?;
        legend.draw(&Text::new(
            l.label.clone(),
            (28, y - LEGEND_FONT as i32 / 2 - 1),
            ("sans-serif", LEGEND_FONT).into_font().color(&BLACK),
        ))?;
    }
    if let Some(footer) = footer {
        footer.draw(&Text::new(
            note.to_string(),
            (90, 4),
            ("sans-serif", 13).into_font().color(&BLACK.mix(0.7)),
        ))?;
    }
    Ok(())
}

/// `bandwidth.svg`: Gb/s per flow per time bin.
pub fn bandwidth(r: &Report) -> String {
    let mut order: Vec<usize> = (0..r.summary.flows.len()).collect();
    order.sort_by(|&a, &b| {
        let (fa, fb) = (&r.summary.flows[a], &r.summary.flows[b]);
        (fb.wire_bytes + fb.payload_bytes)
            .cmp(&(fa.wire_bytes + fa.payload_bytes))
            .then(fa.id.cmp(&fb.id))
    });
    let n = bin_count(r);
    let lines: Vec<Line> = order
        .iter()
        .take(MAX_FLOW_LINES)
        .map(|&i| {
            let f = &r.summary.flows[i];
            let bins = &r.flow_bins[i];
            let points = (0..n)
                .map(|k| {
                    let start = k as Picos * r.bin_ps;
                    let end = (start + r.bin_ps).min(r.duration_ps.max(start + 1));
                    let b = bins.get(k).copied().unwrap_or(0);
                    (to_us(end), b as f64 * 8_000.0 / (end - start) as f64)
                })
                .collect();
            Line {
                label: f.name.clone(),
                points,
            }
        })
        .collect();
    let note = if order.len() > MAX_FLOW_LINES {
        format!(
            "{} largest of {} flows; every flow is in flows.csv",
            MAX_FLOW_LINES,
            order.len()
        )
    } else {
        format!("bins of {} us", to_us(r.bin_ps))
    };
    chart(
        &format!("Bandwidth per flow: {}", r.summary.scenario.name),
        "Gb/s",
        to_us(r.duration_ps),
        &lines,
        &note,
    )
}

/// Ports in decreasing order of `key`, those with `key > 0` only, at most `MAX_PORT_LINES`.
fn top_ports(r: &Report, key: impl Fn(usize) -> u64) -> (Vec<usize>, usize) {
    let mut idx: Vec<usize> = (0..r.summary.ports.len()).filter(|&i| key(i) > 0).collect();
    idx.sort_by(|&a, &b| key(b).cmp(&key(a)).then(a.cmp(&b)));
    let all = idx.len();
    idx.truncate(MAX_PORT_LINES);
    (idx, all)
}

/// `xmit_wait.svg`: for the ports that waited most, the share of each sample interval in
/// which the port had data queued and sent nothing (PortXmitWait increase x tick over the
/// interval).
pub fn xmit_wait(r: &Report) -> String {
    let tick_ps = (r.summary.scenario.xmit_wait_tick_ns * 1000.0)
        .round()
        .max(1.0);
    let (ports, all) = top_ports(r, |i| r.summary.ports[i].port_xmit_wait);
    let lines: Vec<Line> = ports
        .iter()
        .map(|&i| {
            let mut prev = (0u64, 0u64);
            let points = r.series[i]
                .iter()
                .map(|s| {
                    let dt = s.time_ps.saturating_sub(prev.0).max(1);
                    let dw = s.xmit_wait.saturating_sub(prev.1);
                    prev = (s.time_ps, s.xmit_wait);
                    (to_us(s.time_ps), 100.0 * dw as f64 * tick_ps / dt as f64)
                })
                .collect();
            Line {
                label: r.summary.ports[i].port.clone(),
                points,
            }
        })
        .collect();
    let note = if all == 0 {
        "no port waited: PortXmitWait is 0 everywhere".to_string()
    } else {
        format!(
            "{} of {} ports with PortXmitWait > 0 (largest first)",
            lines.len(),
            all
        )
    };
    chart(
        &format!("PortXmitWait: {}", r.summary.scenario.name),
        "% of interval waiting",
        to_us(r.duration_ps),
        &lines,
        &note,
    )
}

/// `buffers.svg`: receive-buffer occupancy (all data VLs) of the ports whose buffers
/// filled most.
pub fn buffers(r: &Report) -> String {
    let (ports, all) = top_ports(r, |i| r.summary.ports[i].rx_buffer_peak_bytes);
    let lines: Vec<Line> = ports
        .iter()
        .map(|&i| Line {
            label: r.summary.ports[i].port.clone(),
            points: r.series[i]
                .iter()
                .map(|s| (to_us(s.time_ps), s.rx_blocks as f64 * 64.0 / 1024.0))
                .collect(),
        })
        .collect();
    let note = if all == 0 {
        "no receive buffer held data at any sample".to_string()
    } else {
        format!(
            "{} of {} ports whose receive buffer held data (largest peak first)",
            lines.len(),
            all
        )
    };
    chart(
        &format!("Receive-buffer occupancy: {}", r.summary.scenario.name),
        "KiB in use",
        to_us(r.duration_ps),
        &lines,
        &note,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (x, y, text) of every `<text>` element of an SVG written by plotters.
    fn texts(svg: &str) -> Vec<(i32, i32, String)> {
        let mut out = Vec::new();
        for part in svg.split("<text ").skip(1) {
            let attr = |name: &str| -> i32 {
                let at = part
                    .find(&format!(" {name}=\""))
                    .map(|i| i + 1)
                    .or_else(|| part.starts_with(&format!("{name}=\"")).then_some(0));
                let rest = &part[at.expect("attribute") + name.len() + 2..];
                rest[..rest.find('"').unwrap()].parse().unwrap()
            };
            let body = &part[part.find('>').unwrap() + 1..part.find("</text>").unwrap()];
            out.push((attr("x"), attr("y"), body.trim().to_string()));
        }
        out
    }

    #[test]
    fn legend_is_right_of_the_plot_and_the_note_below_the_axis_label() {
        // Ten series: the legend must not cover any of the plotting area.
        let lines: Vec<Line> = (0..10)
            .map(|i| Line {
                label: format!("series {i}"),
                points: vec![(0.0, i as f64), (100.0, 10.0 - i as f64)],
            })
            .collect();
        let svg = chart("title", "y", 100.0, &lines, "the note");
        let t = texts(&svg);
        let find = |s: &str| t.iter().find(|(_, _, x)| x == s).expect(s).clone();
        let plot_right = (SIZE.0 - legend_width(&lines)) as i32;
        for i in 0..10 {
            let (x, _, _) = find(&format!("series {i}"));
            assert!(
                x > plot_right,
                "legend entry {i} at x {x}, plot ends at {plot_right}"
            );
        }
        // The x tick labels all sit left of the legend column.
        let rightmost_tick = find("100.0");
        assert!(rightmost_tick.0 <= plot_right, "{rightmost_tick:?}");
        // The note is below the x-axis label, not on it.
        let (_, axis_y, _) = find("simulated time (us)");
        let (_, note_y, _) = find("the note");
        assert!(
            note_y > axis_y + 10,
            "note at y {note_y}, axis label at {axis_y}"
        );
    }

    #[test]
    fn the_legend_column_fits_the_longest_label() {
        let short = [Line {
            label: "a".into(),
            points: vec![],
        }];
        let long = [Line {
            label: "x".repeat(30),
            points: vec![],
        }];
        assert_eq!(legend_width(&[]), 0);
        assert_eq!(legend_width(&short), 110);
        assert_eq!(legend_width(&long), 30 * 7 + 40);
    }
}
