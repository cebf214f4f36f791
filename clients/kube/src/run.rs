//! Start-up and shutdown: clients, informers, leader election, the extender, webhook and web
//! (operator view) listeners, signals.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt;
use gpusched_client::{ClientBuilder, TlsOptions};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::watch;

use crate::admission::WebhookOptions;
use crate::config::Settings;
use crate::leader::{self, Leadership};
use crate::metrics::Metrics;
use crate::preempt::Preemptor;
use crate::quota::QuotaReporter;
use crate::shim::Shim;
use crate::traces::PodTraces;
use crate::view::{ClusterView, HoldTimes};
use crate::web::{Auth, WebState};
use crate::webhook::{self, TlsListener, WebhookState};

async fn kube_config(settings: &Settings) -> anyhow::Result<kube::Config> {
    let config = match &settings.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("kube.kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("kube.kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no Kubernetes configuration (in-cluster, KUBECONFIG or ~/.kube/config)")?,
    };
    Ok(config)
}

fn service_client(settings: &Settings) -> anyhow::Result<gpusched_client::Client> {
    let s = &settings.service;
    let mut b = ClientBuilder::new(s.address.clone()).timeout(Some(s.timeout));
    if let Some(tls) = &s.tls {
        let pem = tls.load()?;
        b = b.tls(TlsOptions {
            ca_pem: pem.ca,
            identity: pem.identity,
            domain: pem.domain,
        });
    }
    b.connect_lazy()
        .map_err(|e| anyhow::anyhow!("service.address {}: {e}", s.address))
}

/// Runs the shim until SIGTERM/SIGINT.
pub fn main(settings: Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(serve(settings))
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let telemetry = gpusched_runtime::logging::init(&settings.telemetry, "gpusched_kube")?;
    let kube_config = kube_config(&settings).await?;
    let client = kube::Client::try_from(kube_config.clone()).context("Kubernetes client")?;
    let service = service_client(&settings)?;
    let names = settings.names.clone();

    // Informers. Pods: only ours (field selector on spec.schedulerName; translate::pod_usage
    // checks it again). Fields nobody reads are dropped to keep the caches small.
    let (node_store, node_writer) = reflector::store::<Node>();
    let (pod_store, pod_writer) = reflector::store::<Pod>();
    let nodes = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(|n: &mut Node| {
            n.managed_fields_mut().clear();
            n.status = None;
        })
        .reflect(node_writer);
    let pod_cfg =
        watcher::Config::default().fields(&format!("spec.schedulerName={}", names.scheduler_name));
    let pods = watcher(Api::<Pod>::all(client.clone()), pod_cfg)
        .default_backoff()
        .modify(|p: &mut Pod| p.managed_fields_mut().clear())
        .reflect(pod_writer);
    tokio::spawn(async move {
        nodes
            .for_each(|e| async move {
                if let Err(e) = e {
                    tracing::warn!(error = %e, "node watch error");
                }
            })
            .await;
    });
    tokio::spawn(async move {
        pods.for_each(|e| async move {
            if let Err(e) = e {
                tracing::warn!(error = %e, "pod watch error");
            }
        })
        .await;
    });
    let mut view = ClusterView::new(node_store, pod_store, names.clone(), settings.assume_ttl)
        .with_reservation_ttl(settings.reservation_ttl)
        .with_policy(settings.policy.clone());
    if let Some(p) = &settings.preemption {
        view = view.with_hold_times(HoldTimes {
            hold: p.hold,
            victims_timeout: p.victims_timeout,
        });
    }
    // ResourceQuotas (all namespaces): the GPU limits; status (rewritten at every pod change by
    // the quota controller) is not read.
    let quotas = if settings.quotas {
        let (store, writer) = reflector::store::<ResourceQuota>();
        view = view.with_quotas(store);
        let stream = watcher(
            Api::<ResourceQuota>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|q: &mut ResourceQuota| {
            q.managed_fields_mut().clear();
            q.status = None;
        })
        .reflect(writer);
        Some(stream)
    } else {
        None
    };
    let view = Arc::new(view);
    // PodDisruptionBudgets, for preemption only (kube-scheduler's count of violations).
    let preemptor = settings
        .preemption
        .map(|_| {
            let (store, writer) = reflector::store::<PodDisruptionBudget>();
            let budgets = watcher(
                Api::<PodDisruptionBudget>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(|b: &mut PodDisruptionBudget| b.managed_fields_mut().clear())
            .reflect(writer);
            tokio::spawn(async move {
                budgets
                    .for_each(|e| async move {
                        if let Err(e) = e {
                            tracing::warn!(error = %e, "PodDisruptionBudget watch error");
                        }
                    })
                    .await;
            });
            let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
            {
                let (store, listed) = (store.clone(), listed.clone());
                tokio::spawn(async move {
                    if store.wait_until_ready().await.is_ok() {
                        listed.store(true, std::sync::atomic::Ordering::SeqCst);
                        tracing::info!("PodDisruptionBudgets listed: preemption on");
                    }
                });
            }
            // Evictions answer 429 when a PodDisruptionBudget refuses: an answer to act on at once,
            // not a transient error to retry for minutes (kube-rs retries 429 by default).
            let mut no_retry = kube_config.clone();
            no_retry.default_retry = false;
            let evictions = kube::Client::try_from(no_retry);
            match evictions {
                Ok(c) => Ok(Preemptor::new(store, listed, c)),
                Err(e) => Err(anyhow::anyhow!("Kubernetes client for evictions: {e}")),
            }
        })
        .transpose()?;
    {
        let view = view.clone();
        tokio::spawn(async move {
            match view.wait_synced().await {
                Ok(()) => tracing::info!("informers synced: nodes and pods listed"),
                Err(e) => tracing::error!(error = %e, "informers stopped before syncing"),
            }
        });
    }

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (leadership, leader_task) = match &settings.leader {
        Some(l) => {
            let state = Arc::new(Leadership::elected(&l.identity));
            let task = tokio::spawn(leader::run(
                client.clone(),
                l.clone(),
                state.clone(),
                shutdown_rx.clone(),
            ));
            tracing::info!(identity = %l.identity, lease = %format!("{}/{}", l.namespace, l.lease_name), "leader election on");
            (state, Some(task))
        }
        None => (Arc::new(Leadership::always("single")), None),
    };
    let identity = leadership.identity().to_owned();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpusched-kube".into(),
            instance: Some(identity),
        },
    );
    if let Some(stream) = quotas {
        let mut reporter = QuotaReporter::new(
            crate::quota::Keys::of(&names),
            Some(recorder.clone()),
            leadership.clone(),
        );
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(e) = stream.next().await {
                match e {
                    Ok(watcher::Event::Apply(q) | watcher::Event::InitApply(q)) => {
                        reporter.observe(&q)
                    }
                    Ok(watcher::Event::Delete(q)) => reporter.forget(&q),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "resourcequota watch error"),
                }
            }
        });
    }
    let shim = Arc::new(Shim {
        view,
        service,
        kube: Some(client),
        leader: leadership,
        recorder: Some(recorder),
        reserve: settings.reserve,
        metrics: Metrics::default(),
        traces: PodTraces::new(telemetry.tracer()),
        preemptor,
    });

    let ext_listener = tokio::net::TcpListener::bind(settings.extender_listen)
        .await
        .with_context(|| format!("extender.listen {}", settings.extender_listen))?;
    let ext_addr = ext_listener.local_addr()?;
    let webhook = match &settings.webhook {
        Some(w) => {
            let l = TlsListener::bind(w.listen, &w.cert, &w.key)
                .await
                .with_context(|| format!("webhook {}", w.listen))?;
            Some((l, w.clone()))
        }
        None => None,
    };
    let webhook_text = match &webhook {
        Some((l, _)) => l.local_addr()?.to_string(),
        None => "off".to_owned(),
    };
    let web = match &settings.web {
        Some(w) => {
            let l = tokio::net::TcpListener::bind(w.listen)
                .await
                .with_context(|| format!("web.listen {}", w.listen))?;
            let state = WebState {
                view: shim.view.clone(),
                // A client of its own: its node sets never replace the extender's.
                service: service_client(&settings)?,
                auth: Auth::new(&w.token),
                max_pending: w.max_pending,
            };
            Some((l, state))
        }
        None => None,
    };
    let web_text = match &web {
        Some((l, _)) => l.local_addr()?.to_string(),
        None => "off".to_owned(),
    };
    // Handlers installed before the start-up line: a SIGTERM right after it is graceful.
    let stop = gpusched_runtime::shutdown::signal();
    println!("gpusched-kube listening extender={ext_addr} webhook={webhook_text} web={web_text}");
    tracing::info!(extender = %ext_addr, webhook = %webhook_text, web = %web_text, "serving");

    let mut tasks = tokio::task::JoinSet::new();
    {
        // The metrics registry, handed to what serves /metrics (for now: the extender listener).
        let registry = Arc::new(shim.registry());
        let router = crate::extender::router(shim.clone())
            .merge(gpusched_runtime::metrics::router(registry));
        let mut rx = shutdown_rx.clone();
        tasks.spawn(async move {
            // kube-scheduler sends small requests on kept-alive connections: no Nagle delays.
            let listener = axum::serve::ListenerExt::tap_io(ext_listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY");
                }
            });
            let r = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|v| *v).await;
                })
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "extender server failed");
            }
        });
    }
    if let Some((listener, w)) = webhook {
        let router = webhook::router(WebhookState {
            shim: shim.clone(),
            options: WebhookOptions {
                mutate: w.mutate,
                ignore_label: w.ignore_label.clone(),
            },
        });
        let rx = shutdown_rx.clone();
        tasks.spawn(async move { listener.serve(router, rx, Duration::from_secs(10)).await });
    }

    if let Some((listener, state)) = web {
        let mut rx = shutdown_rx.clone();
        tasks.spawn(async move {
            let r = axum::serve(listener, crate::web::router(state))
                .with_graceful_shutdown(async move {
                    let _ = rx.wait_for(|v| *v).await;
                })
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "web server failed");
            }
        });
    }

    stop.await;
    tracing::info!("shutting down: releasing the lease, draining connections");
    let _ = shutdown_tx.send(true);
    if let Some(t) = leader_task {
        let _ = tokio::time::timeout(Duration::from_secs(8), t).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(15), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tracing::info!("stopped");
    Ok(())
}
