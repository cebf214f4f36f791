//! GPU quotas of Slurm accounts and QOS as gpusched quota budgets (contract section 10).
//!
//! A job holds count-only GRES equal to its booking (`gres/gpumem` MiB, `gres/gpucore`
//! percent), so an admin limits an account's or a QOS's GPU memory and compute with Slurm's own
//! `GrpTRES` on those TRES (`sacctmgr modify account team-q set
//! GrpTRES=gres/gpumem=20000,gres/gpucore=200`; needs slurmdbd, `AccountingStorageTRES` naming
//! them and `AccountingStorageEnforce=limits`). Slurm enforces such a limit only when a job
//! starts: a job over it stays PENDING (`AssocGrpGRES`) while, for gpusched, its booking holds
//! its cards, which nobody else can then use. So gpusched-sbatch reads the limits that apply to
//! the job, counts what the jobs in each scope hold (every job that holds a booking, pending
//! and held ones too: the same bookings as card usage), and sends the budget with the request:
//! a job that would pass a limit is refused at submission (nothing queued), with the limit
//! named. Slurm's own check then never holds a gpusched job back (it counts running jobs only,
//! a subset of what gpusched counts).
//!
//! Scopes read: the job's account (its association without a user), the user's association in
//! that account, and the job's QOS. Limits of parent accounts are not read (Slurm still
//! enforces them when the job starts). Without accounting (`AccountingStorageType` none)
//! nothing is read and no budget is sent.

use std::collections::BTreeMap;
use std::time::Duration;

use gpusched_client::v1;

use crate::decision::Decision;
use crate::slurm::{self, Job, Owner, SlurmError};

/// The TRES of gpusched's memory GRES.
pub const MEM_TRES: &str = "gres/gpumem";
/// The TRES of gpusched's cores GRES.
pub const CORES_TRES: &str = "gres/gpucore";

/// Whose jobs a limit counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every job of the account.
    Account(String),
    /// Every job of the user in the account.
    User {
        /// The account.
        account: String,
        /// The user.
        user: String,
    },
    /// Every job of the QOS.
    Qos(String),
}

impl Scope {
    fn holds(&self, o: &Owner) -> bool {
        match self {
            Scope::Account(a) => o.account == *a,
            Scope::User { account, user } => o.account == *account && o.user == *user,
            Scope::Qos(q) => o.qos == *q,
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Account(a) => write!(f, "account {a}"),
            Scope::User { account, user } => write!(f, "user {user} in account {account}"),
            Scope::Qos(q) => write!(f, "QOS {q}"),
        }
    }
}

/// One `GrpTRES` limit on gpusched's TRES.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Whose jobs it counts.
    pub scope: Scope,
    /// `gres/gpumem`, MiB.
    pub mem_mib: Option<u64>,
    /// `gres/gpucore`, percent.
    pub cores: Option<u64>,
}

/// The `gres/gpumem` and `gres/gpucore` values of a `GrpTRES` string
/// (`cpu=8,gres/gpumem=20000`); other TRES are Slurm's alone.
pub fn grp_tres(text: &str) -> (Option<u64>, Option<u64>) {
    let mut out = (None, None);
    for item in text.split(',') {
        let Some((k, v)) = item.trim().split_once('=') else {
            continue;
        };
        let v = v.trim().parse::<u64>().ok();
        match k.trim() {
            MEM_TRES => out.0 = v,
            CORES_TRES => out.1 = v,
            _ => {}
        }
    }
    out
}

/// The budget a job may still book under `limits`, from what the jobs in each scope hold
/// (`decisions` of `jobs`, only those with an id below `before` when given: the re-check of a
/// held job counts the jobs submitted before it), and the text that names each limit.
pub fn budget(
    limits: &[Limit],
    jobs: &[Job],
    decisions: &BTreeMap<u64, Decision>,
    before: Option<u64>,
) -> (v1::QuotaBudget, String) {
    let mut b = v1::QuotaBudget::default();
    let mut notes = Vec::new();
    for l in limits {
        let (mut mem, mut cores) = (0u64, 0u64);
        for j in jobs.iter().filter(|j| before.is_none_or(|b| j.id < b)) {
            if let Some(d) = decisions.get(&j.id).filter(|_| l.scope.holds(&j.owner)) {
                mem += d.cards.iter().map(|c| c.mem_mib).sum::<u64>();
                cores += d.cards.iter().map(|c| u64::from(c.cores)).sum::<u64>();
            }
        }
        let mut parts = Vec::new();
        for (tres, limit, used, slot) in [
            (MEM_TRES, l.mem_mib, mem, &mut b.mem_mib),
            (CORES_TRES, l.cores, cores, &mut b.cores),
        ] {
            let Some(limit) = limit else { continue };
            let left = limit.saturating_sub(used);
            *slot = Some(slot.map_or(left, |s| s.min(left)));
            parts.push(format!("{tres}={limit}, {used} held, {left} left"));
        }
        notes.push(format!("{} GrpTRES {}", l.scope, parts.join("; ")));
    }
    (b, notes.join("; "))
}

/// Whether slurmctld keeps accounting (associations and their limits exist only then).
fn accounting_on(show_config: &str) -> bool {
    show_config.lines().any(|l| {
        l.split_once('=').is_some_and(|(k, v)| {
            k.trim() == "AccountingStorageType" && v.trim() != "accounting_storage/none"
        })
    })
}

/// `sacctmgr -nP ...` lines, split on `|`.
async fn sacctmgr(args: &[&str], timeout: Duration) -> Result<Vec<Vec<String>>, SlurmError> {
    let mut all = vec!["-nP"];
    all.extend_from_slice(args);
    let out = slurm::run("sacctmgr", all, timeout).await?;
    Ok(out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('|').map(|f| f.trim().to_owned()).collect())
        .collect())
}

/// The GPU limits that apply to a job of `user` in `account` (default: the user's default
/// account) with `qos` (default: the association's default QOS). Empty without accounting
/// or without such limits.
pub async fn limits(
    user: &str,
    account: Option<&str>,
    qos: Option<&str>,
    timeout: Duration,
) -> Result<Vec<Limit>, SlurmError> {
    let config = slurm::run("scontrol", ["show", "config"], timeout).await?;
    if !accounting_on(&config) {
        return Ok(vec![]);
    }
    let account = match account {
        Some(a) => a.to_owned(),
        None => {
            let name = format!("name={user}");
            let rows = sacctmgr(
                &["show", "user", "where", &name, "format=DefaultAccount"],
                timeout,
            )
            .await?;
            match rows
                .first()
                .and_then(|r| r.first())
                .filter(|a| !a.is_empty())
            {
                Some(a) => a.clone(),
                // No association: Slurm refuses the job itself.
                None => return Ok(vec![]),
            }
        }
    };
    let where_account = format!("account={account}");
    let rows = sacctmgr(
        &[
            "show",
            "assoc",
            "where",
            &where_account,
            "format=User,GrpTRES,DefaultQOS",
        ],
        timeout,
    )
    .await?;
    let mut out = Vec::new();
    let mut default_qos = None;
    let mut push = |scope: Scope, tres: &str| {
        let (mem_mib, cores) = grp_tres(tres);
        if mem_mib.is_some() || cores.is_some() {
            out.push(Limit {
                scope,
                mem_mib,
                cores,
            });
        }
    };
    for r in &rows {
        let field = |i: usize| r.get(i).map_or("", String::as_str);
        match field(0) {
            "" => push(Scope::Account(account.clone()), field(1)),
            u if u == user => {
                push(
                    Scope::User {
                        account: account.clone(),
                        user: user.to_owned(),
                    },
                    field(1),
                );
                default_qos = Some(field(2).to_owned()).filter(|q| !q.is_empty());
            }
            _ => {}
        }
    }
    if let Some(q) = qos.map(str::to_owned).or(default_qos) {
        let name = format!("name={q}");
        let rows = sacctmgr(&["show", "qos", "where", &name, "format=GrpTRES"], timeout).await?;
        if let Some(tres) = rows.first().and_then(|r| r.first()) {
            push(Scope::Qos(q.clone()), tres);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::BookedCard;

    #[test]
    fn grp_tres_reads_gpuscheds_tres_only() {
        for (text, want) in [
            ("", (None, None)),
            ("cpu=8,mem=1000", (None, None)),
            ("cpu=8,gres/gpumem=20000", (Some(20000), None)),
            ("gres/gpucore=200,gres/gpumem=0", (Some(0), Some(200))),
            ("gres/gpumem=junk,gres/gpucore=50", (None, Some(50))),
        ] {
            assert_eq!(grp_tres(text), want, "{text}");
        }
    }

    #[test]
    fn accounting_is_read_from_the_config() {
        assert!(accounting_on(
            "Foo = 1\nAccountingStorageType   = accounting_storage/slurmdbd\n"
        ));
        assert!(!accounting_on(
            "AccountingStorageType   = accounting_storage/none\n"
        ));
        assert!(!accounting_on(""));
    }

    fn job(id: u64, account: &str, qos: &str, user: &str) -> Job {
        Job {
            id,
            state: "RUNNING".into(),
            comment: String::new(),
            owner: Owner {
                account: account.into(),
                qos: qos.into(),
                user: user.into(),
            },
            ..Job::default()
        }
    }

    fn booked(mem: u64, cores: u32) -> Decision {
        Decision {
            node: "n1".into(),
            cards: vec![BookedCard {
                index: 0,
                uuid: "GPU-0".into(),
                mem_mib: mem,
                cores,
            }],
        }
    }

    #[test]
    fn the_budget_is_the_smallest_left_over_the_scopes() {
        let jobs = vec![
            job(1, "team-q", "normal", "alice"),
            job(2, "team-q", "normal", "bob"),
            job(3, "other", "normal", "alice"),
            job(4, "team-q", "high", "alice"),
        ];
        let decisions: BTreeMap<u64, Decision> = [
            (1, booked(8000, 20)),
            (2, booked(4000, 10)),
            (3, booked(16000, 50)),
            (4, booked(2000, 5)),
        ]
        .into_iter()
        .collect();
        let account = Limit {
            scope: Scope::Account("team-q".into()),
            mem_mib: Some(20000),
            cores: None,
        };
        let user = Limit {
            scope: Scope::User {
                account: "team-q".into(),
                user: "alice".into(),
            },
            mem_mib: Some(12000),
            cores: Some(100),
        };
        let qos = Limit {
            scope: Scope::Qos("normal".into()),
            mem_mib: None,
            cores: Some(90),
        };
        /// (limits, before, budget MiB, budget cores).
        type Case = (Vec<Limit>, Option<u64>, Option<u64>, Option<u64>);
        let cases: Vec<Case> = vec![
            (vec![], None, None, None),
            (vec![account.clone()], None, Some(6000), None),
            (vec![account.clone()], Some(2), Some(12000), None),
            (
                vec![account.clone(), user.clone()],
                None,
                Some(2000),
                Some(75),
            ),
            (
                vec![account.clone(), user.clone(), qos.clone()],
                None,
                Some(2000),
                Some(10),
            ),
        ];
        for (limits, before, mem, cores) in cases {
            let (b, _) = budget(&limits, &jobs, &decisions, before);
            assert_eq!(
                (b.mem_mib, b.cores),
                (mem, cores),
                "{limits:?} before {before:?}"
            );
        }
        let (_, note) = budget(&[account, qos], &jobs, &decisions, None);
        assert_eq!(
            note,
            "account team-q GrpTRES gres/gpumem=20000, 14000 held, 6000 left; QOS normal \
             GrpTRES gres/gpucore=90, 80 held, 10 left"
        );
    }
}
