//! Writes the view to disk: real files, directories and symlinks under a private
//! directory, built atomically (in a scratch directory renamed into place), named by a
//! hash of its content. Processes with the same device share one tree; a process never
//! sees a half-built one; nothing needs cleaning up (a tree takes about 200 KB, and there
//! is one per distinct device configuration).

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::{symlink, DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::sysfs::{HostFacts, Node};

/// Bumped whenever the layout changes, so an old tree of the same device is not reused.
const LAYOUT_VERSION: u32 = 2;

/// The host facts the view copies: all online CPUs (a virtual device is local to every
/// CPU) and the device numbers of `/dev/null`.
pub fn host_facts() -> HostFacts {
    let online = fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| parse_cpu_list(t.trim()))
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            (0..n).collect()
        });
    let possible = fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| parse_cpu_list(t.trim()))
        .and_then(|v| v.iter().max().map(|m| m + 1))
        .unwrap_or_else(|| online.iter().max().map_or(1, |m| m + 1));
    let rdev = fs::metadata("/dev/null").map_or(0, |m| m.rdev());
    HostFacts {
        local_cpus: bitmap_text(&online, possible.max(1)),
        local_cpulist: cpu_list_text(&online),
        node_rdev: (dev_major(rdev), dev_minor(rdev)),
    }
}

/// glibc's gnu_dev_major.
fn dev_major(dev: u64) -> u32 {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32
}

/// glibc's gnu_dev_minor.
fn dev_minor(dev: u64) -> u32 {
    ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32
}

/// A kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The kernel's `%*pbl` of a CPU set.
fn cpu_list_text(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// The kernel's `%*pb` of a bitmap of `nbits` bits: 32-bit words in hex, most significant
/// first, comma separated; the first word as wide as its bits need, the others 8 digits.
pub fn bitmap_text(set: &[u32], nbits: u32) -> String {
    let words = nbits.div_ceil(32) as usize;
    let mut w = vec![0u32; words];
    for &c in set.iter().filter(|&&c| c < nbits) {
        w[(c / 32) as usize] |= 1 << (c % 32);
    }
    let first_width = match nbits % 32 {
        0 => 8,
        r => r.div_ceil(4) as usize,
    };
    let mut out = Vec::new();
    for (i, word) in w.iter().enumerate().rev() {
        let width = if i == words - 1 { first_width } else { 8 };
        out.push(format!("{word:0width$x}"));
    }
    out.join(",")
}

/// FNV-1a, 64 bits: names the tree by its content.
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn content_hash(entries: &[(String, Node)]) -> u64 {
    let mut text = format!("layout {LAYOUT_VERSION}\n");
    for (p, n) in entries {
        match n {
            Node::Dir => text.push_str(&format!("d {p}\n")),
            Node::File(t) => text.push_str(&format!("f {p} {} {t}\n", t.len())),
            Node::Symlink(t) => text.push_str(&format!("l {p} {t}\n")),
            Node::SameAs(t) => text.push_str(&format!("h {p} {t}\n")),
        }
    }
    fnv1a(text.into_bytes())
}

/// The directory holding this user's trees: `$TMPDIR/softib-view-<uid>`, mode 0700, which
/// must be a directory this user owns (not a symlink someone else planted).
fn private_base() -> io::Result<PathBuf> {
    let uid = fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
    let base = std::env::temp_dir().join(format!("softib-view-{uid}"));
    match DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::symlink_metadata(&base)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private directory of uid {uid} (remove it)",
                base.display()
            ),
        ));
    }
    Ok(base)
}

/// Writes `entries` under a fresh tree (or finds the identical tree another process
/// built) and returns its root.
pub fn materialize(entries: &[(String, Node)]) -> io::Result<PathBuf> {
    let base = private_base()?;
    let root = base.join(format!("{:016x}", content_hash(entries)));
    if root.is_dir() {
        return Ok(root);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let scratch = base.join(format!(".build-{}-{nanos}", std::process::id()));
    let built = write_all(&scratch, entries).and_then(|()| fs::rename(&scratch, &root));
    match built {
        Ok(()) => Ok(root),
        // Another process renamed its identical tree into place first.
        Err(_) if root.is_dir() => {
            let _ = fs::remove_dir_all(&scratch);
            Ok(root)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&scratch);
            Err(e)
        }
    }
}

fn write_all(scratch: &Path, entries: &[(String, Node)]) -> io::Result<()> {
    DirBuilder::new().mode(0o755).create(scratch)?;
    for (rel, node) in entries {
        let p = scratch.join(rel);
        match node {
            Node::Dir => DirBuilder::new().mode(0o755).create(&p)?,
            Node::File(text) => {
                fs::write(&p, text)?;
                // sysfs attributes are read-only (0444).
                fs::set_permissions(&p, fs::Permissions::from_mode(0o444))?;
            }
            Node::Symlink(target) => symlink(target, &p)?,
            Node::SameAs(other) => fs::hard_link(scratch.join(other), &p)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_bitmaps_print_as_the_kernel_prints_them() {
        assert_eq!(bitmap_text(&[0, 1], 2), "3");
        assert_eq!(bitmap_text(&[0, 1, 2, 3], 8), "0f");
        assert_eq!(
            bitmap_text(&(0..64).collect::<Vec<_>>(), 64),
            "ffffffff,ffffffff"
        );
        assert_eq!(bitmap_text(&[0, 33], 40), "02,00000001");
        assert_eq!(parse_cpu_list("0-3,8,10-11").unwrap().len(), 7);
        assert_eq!(cpu_list_text(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(parse_cpu_list("3-1"), None);
    }

    #[test]
    fn a_tree_is_built_once_and_shared() {
        let tag = format!(
            "test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let entries = vec![
            (tag.clone(), Node::Dir),
            (format!("{tag}/a"), Node::File("x\n".into())),
            (format!("{tag}/l"), Node::Symlink("/dev/null".into())),
            (format!("{tag}/h"), Node::SameAs(format!("{tag}/a"))),
        ];
        let r1 = materialize(&entries).unwrap();
        let r2 = materialize(&entries).unwrap();
        assert_eq!(r1, r2);
        assert_eq!(fs::read_to_string(r1.join(&tag).join("a")).unwrap(), "x\n");
        assert_eq!(
            fs::read_link(r1.join(&tag).join("l")).unwrap(),
            Path::new("/dev/null")
        );
        let h = fs::metadata(r1.join(&tag).join("h")).unwrap();
        assert!(h.is_file() && h.nlink() == 2);
        let _ = fs::remove_dir_all(&r1);
    }
}
