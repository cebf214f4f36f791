//! Writes a synthetic trace in the openb format (no real data): `nodes.csv` and `pods.csv`.
//!
//! `cargo run -p gpusched-sim --example gen_trace -- OUT_DIR [PODS] [SEED]`
//!
//! The cluster: 48 nodes (8-card G2 and V100M32, 4-card V100M16, 2-card T4 and P100, 1-card
//! A10). The pods: about 12% without GPU; GPU pods mostly one card with a share drawn from
//! {10, 25, 30, 50, 75, 100, 100}%, some with 2, 4 or 8 whole cards, one in seven restricted to
//! `V100M32|G2`; arrivals every 0-11 s, durations 40-2,000 s.

use std::fmt::Write as _;

struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().unwrap_or_else(|| "sim-trace".into()));
    let pods: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(42);
    std::fs::create_dir_all(&out)?;

    let mut nodes = String::from("sn,cpu_milli,memory_mib,gpu,model\n");
    let kinds = [
        ("G2", 8, 12),
        ("V100M32", 8, 4),
        ("V100M16", 4, 6),
        ("T4", 2, 14),
        ("P100", 2, 8),
        ("A10", 1, 4),
    ];
    let mut i = 0;
    for (model, gpus, count) in kinds {
        for _ in 0..count {
            let _ = writeln!(nodes, "sim-node-{i:03},96000,786432,{gpus},{model}");
            i += 1;
        }
    }
    std::fs::write(out.join("nodes.csv"), nodes)?;

    let mut r = Lcg(seed);
    let mut s = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
    );
    let mut t = 0u64;
    for i in 0..pods {
        t += r.next() % 12;
        let num_gpu = r.pick(&[0u32, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8]);
        let milli = match num_gpu {
            0 => 0,
            1 => r.pick(&[100u32, 250, 300, 500, 750, 1000, 1000]),
            _ => 1000,
        };
        let spec = if i % 7 == 3 { "V100M32|G2" } else { "" };
        let leave = t + 40 + r.next() % 1960;
        let _ = writeln!(
            s,
            "sim-pod-{i:05},4000,8192,{num_gpu},{milli},{spec},LS,Running,{t},{leave},{t}"
        );
    }
    std::fs::write(out.join("pods.csv"), s)?;
    eprintln!(
        "wrote {}/nodes.csv and {}/pods.csv",
        out.display(),
        out.display()
    );
    Ok(())
}
