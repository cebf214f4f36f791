//! # gpusched-kube
//!
//! The thin layer that lets kube-scheduler use gpusched: a scheduler extender (`/filter`,
//! `/prioritize`, `/bind`) and an admission webhook (`/validate`, `/mutate`), over a cluster
//! view built from kube-rs reflectors on Nodes and Pods. Every placement decision is the
//! gpusched service's; this crate only translates Kubernetes objects and HAMi's annotation
//! protocol to and from the v1 API.

pub mod config;
pub mod extender;
pub mod leader;
pub mod run;
pub mod shim;
pub mod translate;
pub mod view;
pub mod webhook;
