//! The PNG chart of the throughput table: one group of bars per command, one bar per pipeline depth,
//! random keys.

use plotters::prelude::*;
use std::path::Path;

const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// `rows`: (command, pipeline, random keys, req/s).
pub fn draw(
    path: &Path,
    title: &str,
    rows: &[(&str, usize, bool, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    let font = std::fs::read(FONT).map_err(|e| format!("{FONT}: {e} (Debian: fonts-dejavu-core)"))?;
    plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(font.into_boxed_slice()))
        .map_err(|_| "cannot load the font")?;
    let mut names: Vec<&str> = Vec::new();
    for (name, ..) in rows {
        if !names.contains(name) {
            names.push(name);
        }
    }
    let value = |name: &str, pipeline: usize| {
        rows.iter().find(|r| r.0 == name && r.1 == pipeline && r.2).map_or(0.0, |r| r.3 / 1000.0)
    };
    let top = rows.iter().filter(|r| r.2).map(|r| r.3 / 1000.0).fold(0.0, f64::max) * 1.15;
    let root = BitMapBackend::new(path, (1200, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(16)
        .x_label_area_size(150)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..names.len() as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("thousand requests per second")
        .label_style(("sans-serif", 14))
        .draw()?;
    for (series, (pipeline, color)) in [(16usize, BLUE), (1, RGBColor(230, 140, 20))].into_iter().enumerate()
    {
        let offset = 0.1 + series as f64 * 0.4;
        chart
            .draw_series(names.iter().enumerate().map(|(i, name)| {
                let x = i as f64 + offset;
                Rectangle::new([(x, 0.0), (x + 0.38, value(name, pipeline))], color.filled())
            }))?
            .label(format!("pipeline {pipeline}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
        chart.draw_series(names.iter().enumerate().map(|(i, name)| {
            let v = value(name, pipeline);
            Text::new(format!("{v:.0}"), (i as f64 + offset + 0.02, v + top * 0.01), ("sans-serif", 12))
        }))?;
    }
    // Category names under the axis, in pixels, wrapped two words a line.
    for (i, name) in names.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64 + 0.1, 0.0));
        let words: Vec<&str> = name.split(' ').collect();
        for (line, chunk) in words.chunks(2).enumerate() {
            root.draw(&Text::new(chunk.join(" "), (x, y + 10 + 18 * line as i32), ("sans-serif", 14)))?;
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .label_font(("sans-serif", 14))
        .draw()?;
    root.present()?;
    Ok(())
}
