//! # gpusched-kube
//!
//! The thin layer that lets kube-scheduler use gpusched: a scheduler extender (`/filter`,
//! `/prioritize`, `/bind`) and an admission webhook (`/validate`, `/mutate`), over a cluster
//! view built from kube-rs reflectors on Nodes and Pods. Every placement decision is the
//! gpusched service's; this crate only translates Kubernetes objects and HAMi's annotation
//! protocol to and from the v1 API.
//!
//! Layers (each imports only those above it): wire types ([`extender_v1`]; admission reviews
//! are kube's) ← answers and logic ([`answer`], [`admission`], [`shim`], over [`view`],
//! [`translate`] with [`mig`], [`fgd`], [`quota`], [`leader`], [`metrics`], [`traces`], [`preempt`]) ← HTTP handlers ([`extender`], [`webhook`]) ←
//! start-up ([`run`]).

pub mod admission;
pub mod answer;
pub mod config;
pub mod events;
pub mod extender;
pub mod extender_v1;
pub mod fgd;
pub mod inventory;
pub mod inventory_check;
pub mod leader;
pub mod metrics;
pub mod mig;
pub mod preempt;
pub mod quota;
pub mod run;
pub mod shim;
pub mod traces;
pub mod translate;
pub mod view;
pub mod web;
pub mod webhook;
