//! Installing the simulated driver libraries for a box's driver profile
//! (`vramdoc sim libs DIR`): one build of crates/simgpu exports every entry point, but a real
//! library of an older branch lacks some (`nvmlDeviceGetMemoryInfo_v2` before R510,
//! `nvmlDeviceGetRunningProcessDetailList` before R550, …), and clients decide by looking the
//! symbol up (nvitop: `_nvmlLookupFunctionPointer`; nvml-wrapper: `FailedToLoadSymbol`). The
//! installed copy has those names removed from its dynamic symbol table, so `dlsym` fails
//! for them exactly as on that branch ([`crate::profile::missing_symbols`]).
//!
//! How: in the ELF's `.dynstr` section, each missing name's first byte is overwritten (`n` →
//! `_`); the dynamic loader then finds no symbol by that name (its hash and its string no
//! longer match). Nothing else in the file changes.

use crate::{io_err, SimError};
use std::path::{Path, PathBuf};

/// The names the library is installed under.
pub const NAMES: [&str; 4] = [
    "libcuda.so",
    "libcuda.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml.so",
];

fn bad(path: &Path, why: &str) -> SimError {
    SimError::BadBox {
        dir: path.to_path_buf(),
        reason: format!("{}: {why}", path.display()),
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Byte range of the section called `name` in a little-endian ELF64 image.
fn section(elf: &[u8], name: &[u8]) -> Option<std::ops::Range<usize>> {
    if elf.get(..4)? != b"\x7fELF" || elf.get(4)? != &2 || elf.get(5)? != &1 {
        return None;
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let shentsize = u16_at(elf, 0x3A)? as usize;
    let shnum = u16_at(elf, 0x3C)? as usize;
    let shstrndx = u16_at(elf, 0x3E)? as usize;
    let sh = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let strtab = sh(shstrndx)?;
    let str_off = u64_at(elf, strtab + 0x18)? as usize;
    for i in 0..shnum {
        let h = sh(i)?;
        let name_off = u32_at(elf, h)? as usize;
        let start = str_off.checked_add(name_off)?;
        let end = start + elf.get(start..)?.iter().position(|b| *b == 0)?;
        if &elf[start..end] == name {
            let off = u64_at(elf, h + 0x18)? as usize;
            let size = u64_at(elf, h + 0x20)? as usize;
            elf.get(off..off.checked_add(size)?)?;
            return Some(off..off + size);
        }
    }
    None
}

/// Remove `symbols` from the dynamic symbol table of `elf` (in place); returns the names it
/// found and removed.
pub fn hide_symbols(elf: &mut [u8], symbols: &[&str]) -> Option<Vec<String>> {
    let r = section(elf, b".dynstr")?;
    let dynstr = &mut elf[r];
    let mut hidden = Vec::new();
    for sym in symbols {
        let needle: Vec<u8> = [&[0u8][..], sym.as_bytes(), &[0u8][..]].concat();
        let mut at = 0;
        while let Some(pos) = dynstr[at..]
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
        {
            let i = at + pos + 1;
            dynstr[i] = b'_';
            if !hidden.iter().any(|h| h == sym) {
                hidden.push(sym.to_string());
            }
            at = i;
        }
    }
    Some(hidden)
}

/// Install `src` (a build of crates/simgpu) into `dir` under the driver libraries' names,
/// without the entry points `driver_version`'s branch lacks. Returns the names removed.
pub fn install(src: &Path, dir: &Path, driver_version: &str) -> Result<Vec<String>, SimError> {
    let mut elf = std::fs::read(src).map_err(io_err(src))?;
    let missing = crate::profile::missing_symbols(driver_version);
    let hidden = hide_symbols(&mut elf, &missing).ok_or_else(|| {
        bad(
            src,
            "not a 64-bit little-endian ELF shared object with .dynstr",
        )
    })?;
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    for name in NAMES {
        let dest: PathBuf = dir.join(name);
        // Write then rename, so a program loading the library never sees half a file.
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, &elf).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
    }
    Ok(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_elf_input_is_refused_and_missing_names_are_reported() {
        let mut junk = b"not an elf".to_vec();
        assert!(hide_symbols(&mut junk, &["x"]).is_none());
        // This test binary is an ELF with a .dynstr: hiding a name it lacks hides nothing.
        let exe = std::env::current_exe().unwrap();
        let mut elf = std::fs::read(exe).unwrap();
        let before = elf.clone();
        assert_eq!(
            hide_symbols(&mut elf, &["no_such_symbol_anywhere_1234"]),
            Some(vec![])
        );
        assert_eq!(elf, before);
    }
}
