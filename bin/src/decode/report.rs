//! What a decode measured, printed as a table or one JSON object.

use super::*;

/// What a run measured, printed as a table or one JSON object.
pub(super) struct Report<'a> {
    pub(super) args: &'a DecodeArgs,
    pub(super) model_name: &'a str,
    pub(super) mesh: &'a MeshDevice,
    pub(super) model: &'a DeviceLlama,
    pub(super) prompt_tokens: usize,
    pub(super) generated: &'a [u32],
    /// The ids fed after the prompt under `--score-against`.
    pub(super) forced: Option<&'a [u32]>,
    pub(super) host_reference: Option<&'a HostRun>,
    pub(super) text: &'a str,
    pub(super) total: Duration,
    /// Median step and host dispatch time of the requested mode's steady state.
    pub(super) step: Duration,
    pub(super) host: Duration,
    /// (step, host) of the untraced first steps of a traced run.
    pub(super) untraced_first: Option<(Duration, Duration)>,
    pub(super) wire_bytes_per_token: Option<f64>,
}

impl Report<'_> {
    fn traced(&self) -> bool {
        !self.args.no_trace
    }

    fn tokens_per_s(&self) -> f64 {
        (self.generated.len() * self.args.batch) as f64
            / self.total.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Under `--score-against`: how many greedy picks equal the ids fed, of how many.
    fn teacher_forced_agreement(&self) -> Option<(usize, usize)> {
        let forced = self.forced?;
        let agree = self
            .generated
            .iter()
            .zip(forced)
            .filter(|(a, b)| a == b)
            .count();
        Some((agree, self.generated.len()))
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let p = self.model.parallel();
        let (all_reduces, all_gathers) = self.model.collectives_per_step();
        let chips: Vec<_> = self
            .mesh
            .reports()
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "coord": [r.coord.row, r.coord.col],
                    "dram_allocated": r.dram_allocated, "dram_capacity": r.dram_capacity,
                    "l1_allocated": r.l1_allocated, "trace_allocated": r.trace_allocated,
                    "trace_region_size": r.trace_region_size, "trace_replays": r.trace_replays,
                    "host_bytes": r.host_bytes,
                })
            })
            .collect();
        json!({
            "model": self.model_name, "mesh": self.args.on.mesh, "chips": self.mesh.num_devices(),
            "fabric": self.args.on.fabric_name(),
            "parallel": {
                "degree": p.degree, "cluster_axis": p.cluster_axis, "replicas": p.replicas,
                "query_heads_per_chip": p.local_heads(), "kv_heads_per_chip": p.local_kv_heads(),
                "lm_head": format!("{:?}", p.lm_head).to_lowercase(),
                "both_axes": p.both_axes, "ffn_size": p.ffn_size, "ffn_padding": p.ffn_padding,
            },
            "dtype": self.args.dtype, "batch": self.args.batch, "traced": self.traced(),
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated.len(),
            "token_ids": self.generated, "text": self.text,
            "host_reference": self.host_reference.map(|h| json!({"token_ids": h.ids, "equal": h.first_difference(self.generated).is_none(), "first_difference": h.first_difference(self.generated), "ms_per_token": ms(h.per_token)})),
            "teacher_forced": self.teacher_forced_agreement().map(|(agree, of)| json!({"fed_ids": self.forced, "top1_agree": agree, "of": of})),
            "tokens_per_s": self.tokens_per_s(),
            "median_step_ms": ms(self.step),
            "host_ms_per_token": ms(self.host),
            "untraced_first_steps": self.untraced_first.map(|(s, h)| json!({"median_step_ms": ms(s), "host_ms_per_token": ms(h)})),
            "total_s": self.total.as_secs_f64(),
            "replay_skew_us": self.mesh.last_replay().map(|r| r.skew_us),
            "collectives_per_token": {"all_reduce": all_reduces, "all_gather": all_gathers},
            "fabric_wire_bytes_per_token": self.wire_bytes_per_token,
            "weights_bytes_per_chip": self.model.dram_bytes_per_chip().0,
            "kv_cache_bytes_per_chip": self.model.dram_bytes_per_chip().1,
            "per_chip": chips,
            "host_peak_rss_bytes": peak_rss_bytes(),
        })
    }

    pub(super) fn print(&self) {
        let a = self.args;
        println!(
            "\n{} on {} ({} chip(s), {} fabric), {}, batch {}",
            self.model_name,
            a.on.mesh,
            self.mesh.num_devices(),
            a.on.fabric_name(),
            a.dtype,
            a.batch
        );
        println!("{}", self.model.parallel().describe());
        println!(
            "{} prompt + {} generated tokens in {:.2} s: {:.1} tokens/s",
            self.prompt_tokens,
            self.generated.len(),
            self.total.as_secs_f64(),
            self.tokens_per_s()
        );
        let mode = if self.traced() { "traced" } else { "untraced" };
        println!(
            "{:<38} {:>12} {:>22}",
            "per token (median)", "step", "host time (dispatch)"
        );
        println!(
            "{:<38} {:>9.2} ms {:>19.3} ms",
            mode,
            ms(self.step),
            ms(self.host)
        );
        if let Some((s, h)) = self.untraced_first {
            println!(
                "{:<38} {:>9.2} ms {:>19.3} ms",
                "untraced (first steps, incl. compile)",
                ms(s),
                ms(h)
            );
            println!(
                "trace removes {:.1}x of the host time per token and {:.2}x of the step time",
                h.as_secs_f64() / self.host.as_secs_f64().max(1e-9),
                s.as_secs_f64() / self.step.as_secs_f64().max(1e-9)
            );
        }
        let (all_reduces, all_gathers) = self.model.collectives_per_step();
        if all_reduces + all_gathers > 0 {
            let phases = if self.model.parallel().both_axes {
                " (each over the whole mesh: along columns then rows, the gather rows then columns)"
            } else {
                ""
            };
            println!(
                "collectives per token: {all_reduces} all_reduce + {all_gathers} all_gather{phases}; fabric wire bytes per token {}",
                self.wire_bytes_per_token
                    .map_or("n/a".into(), |b| format!("{:.2} MiB (measured on the links)", b / (1 << 20) as f64))
            );
        }
        let (weights, cache) = self.model.dram_bytes_per_chip();
        println!(
            "each chip's DRAM holds {:.2} MiB of weights and {:.2} MiB of KV cache",
            mib(weights),
            mib(cache)
        );
        println!(
            "{:>5} {:>7} {:>12} {:>10} {:>12} {:>8} {:>12}",
            "chip", "coord", "DRAM", "L1", "TRACE", "replays", "host"
        );
        let reports = self.mesh.reports();
        for r in &reports {
            println!(
                "{:>5} {:>7} {:>8.2} MiB {:>6.2} MiB {:>8.2} MiB {:>8} {:>8.2} MiB",
                r.id,
                format!("({},{})", r.coord.row, r.coord.col),
                mib(r.dram_allocated),
                mib(r.l1_allocated),
                mib(r.trace_allocated),
                r.trace_replays,
                mib(r.host_bytes)
            );
        }
        let device: u64 = reports
            .iter()
            .map(|r| r.dram_allocated + r.l1_allocated)
            .sum();
        let host: u64 = reports.iter().map(|r| r.host_bytes).sum();
        println!(
            "chip memory on the host: {:.2} MiB for {:.2} MiB allocated on the devices (equal chunks stored once); process peak RSS {}",
            mib(host),
            mib(device),
            peak_rss_bytes().map_or("n/a".into(), |b| format!("{:.2} MiB", mib(b)))
        );
        if let Some(r) = self.mesh.last_replay() {
            println!("replay skew between chips (last step): {:.1} us", r.skew_us);
        }
        println!("token ids: {:?}", self.generated);
        if let Some(h) = self.host_reference {
            match h.first_difference(self.generated) {
                None => println!(
                    "host f32 reference: the same {} ids ({:.1} ms per token on the host)",
                    h.ids.len(),
                    ms(h.per_token)
                ),
                Some(i) => println!(
                    "host f32 reference: ids differ from token {i} on (device {:?}, host {:?}); host ids {:?}",
                    self.generated.get(i),
                    h.ids.get(i),
                    h.ids
                ),
            }
        }
        if let Some((agree, of)) = self.teacher_forced_agreement() {
            println!(
                "teacher forced (--score-against): {agree} of {of} greedy picks equal the ids fed"
            );
        }
    }
}
