//! bridgewire
