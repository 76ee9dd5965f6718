//! Tests of the NVML structs against nvml.h and of the bus-id parser.

use super::device::parse_bus_id;
use super::*;

#[test]
fn struct_layouts_match_nvml_h() {
    assert_eq!(std::mem::size_of::<nvmlMemory_t>(), 24);
    assert_eq!(std::mem::size_of::<nvmlMemory_v2_t>(), 40);
    assert_eq!(NVML_MEMORY_V2_VERSION, 0x0200_0028);
    assert_eq!(std::mem::size_of::<nvmlProcessInfo_v1_t>(), 16);
    assert_eq!(std::mem::size_of::<nvmlProcessInfo_v2_t>(), 24);
    assert_eq!(std::mem::size_of::<nvmlProcessDetail_v1_t>(), 32);
    assert_eq!(std::mem::size_of::<nvmlProcessDetailList_t>(), 24);
    assert_eq!(NVML_PROCESS_DETAIL_LIST_V1, 0x0100_0018);
    assert_eq!(std::mem::size_of::<nvmlPciInfo_t>(), 68);
    assert_eq!(std::mem::size_of::<nvmlUtilization_t>(), 8);
}

#[test]
fn bus_ids_parse_in_both_formats() {
    assert_eq!(parse_bus_id("00000000:17:00.0"), Some((0, 0x17, 0, 0)));
    assert_eq!(parse_bus_id("0000:27:00.0"), Some((0, 0x27, 0, 0)));
    assert_eq!(parse_bus_id("27:00.0"), Some((0, 0x27, 0, 0)));
    assert_eq!(parse_bus_id("garbage"), None);
}
