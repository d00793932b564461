// flashalt.cu: the attention variants the GPT model does not launch by
// default (flash.go's flashVariant): the first kernels (the reference of
// the others), and the _pipe, _wide and _ds entry points not in flash.cu.
// They give the same bits; the tests run every variant.
#include "flash.cuh"

FLASH_FWD(flash_fwd_d64, flash_fwd<64>)
FLASH_FWD(flash_fwd_d128, flash_fwd<128>)
FLASH_DKDV(flash_bwd_dkdv_d64, flash_dkdv<64, 64>)
FLASH_DKDV(flash_bwd_dkdv_d128, flash_dkdv<128, 32>)
FLASH_DQ(flash_bwd_dq_d64, flash_dq<64>)
FLASH_DQ(flash_bwd_dq_d128, flash_dq<128>)

FLASH_FWD(flash_fwd_d64_pipe, flash_fwd_w<64, 1>)
FLASH_FWD(flash_fwd_d128_pipe, flash_fwd_w<128, 1>)
FLASH_DQ(flash_bwd_dq_d128_pipe, flash_dq_w<128, 64, 1>)

FLASH_DQ(flash_bwd_dq_d64_wide, flash_dq_w<64, 64, 2>)
FLASH_DKDV(flash_bwd_dkdv_d64_wide, flash_dkdv_w<64, 32, 2>)
FLASH_DKDV(flash_bwd_dkdv_d128_wide, flash_dkdv_w<128, 64, 1>)

FLASH_DKDV_DS(flash_bwd_dkdv_d64_ds, flash_dkdv_w<64, 64, 1, true>)
FLASH_DKDV_DS(flash_bwd_dkdv_d128_ds, flash_dkdv_w<128, 32, 1, true>)
FLASH_DQ_DS(flash_bwd_dq_d64_ds, 64)
FLASH_DQ_DS(flash_bwd_dq_d128_ds, 128)
