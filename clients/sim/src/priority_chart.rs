//! The priorities chart (`priorities.svg|png`): per priority class, the placed rate of each
//! set-up with preemption off and on (left), and the GPU-hours its workloads lost to eviction
//! (right). Bars side by side, one colour per set-up and mode.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::chart::{COLORS, Pixels, err, titled};
use crate::preempt::PriorityResult;
use crate::priority::class_name;

/// Chart size in pixels.
const SIZE: (u32, u32) = (1500, 600);

fn series_name(r: &PriorityResult) -> String {
    format!(
        "{}, preemption {}",
        r.setup,
        if r.preemption { "on" } else { "off" }
    )
}

/// The classes of every result, ascending.
fn classes(results: &[PriorityResult]) -> Vec<i32> {
    let mut v: Vec<i32> = results
        .iter()
        .flat_map(|r| r.classes.keys().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

type Value = fn(&PriorityResult, i32) -> f64;

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    results: &[PriorityResult],
    value: Value,
    openb: bool,
    legend: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let cls = classes(results);
    let n = results.len().max(1);
    let y1 = results
        .iter()
        .flat_map(|r| cls.iter().map(move |&c| value(r, c)))
        .fold(0.0f64, f64::max)
        .max(1.0)
        // Room above the bars for the legend.
        * if legend { 1.4 } else { 1.1 };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..cls.len().max(1) as f64, 0.0..y1)
        .map_err(err("axes"))?;
    let names: Vec<String> = cls.iter().map(|&c| class_name(c, openb)).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cls.len().max(1) * 2 + 1)
        .x_label_formatter(&|v| {
            let i = v.floor() as usize;
            if (v - i as f64 - 0.5).abs() < 1e-6 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_labels(6)
        .draw()
        .map_err(err("mesh"))?;
    let width = 0.8 / n as f64;
    for (s, r) in results.iter().enumerate() {
        let color = COLORS[s % COLORS.len()];
        let bars = cls.iter().enumerate().map(move |(i, &c)| {
            let x0 = i as f64 + 0.1 + s as f64 * width;
            Rectangle::new([(x0, 0.0), (x0 + width, value(r, c))], color.filled())
        });
        let drawn = chart.draw_series(bars).map_err(err("bars"))?;
        if legend {
            drawn.label(series_name(r)).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
            });
        }
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    results: &[PriorityResult],
    openb: bool,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let areas = titled(root, title)?.split_evenly((1, 2));
    let placed: Value = |r, c| r.classes.get(&c).map_or(0.0, |x| x.placed_pct);
    let lost: Value = |r, c| r.classes.get(&c).map_or(0.0, |x| x.evicted_gpu_hours);
    if let [left, right] = areas.as_slice() {
        panel(
            left,
            "placed on arrival, % of the class's arrivals",
            results,
            placed,
            openb,
            true,
        )?;
        panel(
            right,
            "GPU-hours lost to eviction",
            results,
            lost,
            openb,
            false,
        )?;
    }
    Ok(())
}

/// Writes `priorities.svg` (and `.png` when `png`) into `dir`; the file names written.
pub fn write(
    dir: &Path,
    title: &str,
    results: &[PriorityResult],
    openb: bool,
    png: bool,
) -> anyhow::Result<Vec<String>> {
    let svg = dir.join("priorities.svg");
    {
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        draw(&root, title, results, openb)?;
        root.present()
            .map_err(|e| anyhow!("writing {}: {e}", svg.display()))?;
    }
    let mut out = vec!["priorities.svg".to_owned()];
    if png {
        let mut px = Pixels::new(SIZE);
        {
            let root = (&mut px).into_drawing_area();
            draw(&root, title, results, openb)?;
        }
        px.write_png(&dir.join("priorities.png"))?;
        out.push("priorities.png".to_owned());
    }
    Ok(out)
}

/// The Markdown section: one row per set-up, mode and class, then the preemption totals.
pub fn markdown(results: &[PriorityResult], openb: bool) -> String {
    let mut s = String::new();
    s.push_str("\n## Priorities and preemption\n\n");
    s.push_str("| set-up | preemption | class | arrivals | placed | of which by preemption | placed % | evicted | GPU-hours lost |\n");
    s.push_str("|---|---|---|---:|---:|---:|---:|---:|---:|\n");
    for r in results {
        for (c, x) in &r.classes {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {:.1}% | {} | {:.1} |",
                r.setup,
                if r.preemption { "on" } else { "off" },
                class_name(*c, openb),
                x.arrivals,
                x.placed,
                x.placed_by_preemption,
                x.placed_pct,
                x.evicted,
                x.evicted_gpu_hours
            );
        }
    }
    s.push_str("\n| set-up | preemption | preemptions | victims | victims per preemption (max) | GPU-hours lost |\n");
    s.push_str("|---|---|---:|---:|---:|---:|\n");
    for r in results {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} ({}) | {:.1} |",
            r.setup,
            if r.preemption { "on" } else { "off" },
            r.preemptions,
            r.victims,
            r.victims_per_preemption,
            r.max_victims,
            r.evicted_gpu_hours
        );
    }
    s.push_str(
        "\nOne Allocate per arrival over every node; with preemption on, an arrival that fits \
         nowhere asks Preempt with every running workload and, when a node is named, evicts its \
         victims (not retried) and takes the answered placement. GPU-hours lost: each victim's \
         GPU demand times how long it had run. Chart: `priorities.svg`.\n",
    );
    s
}
