package checkpoint

import (
	"context"
	"errors"

	"github.com/distopt/distopt/optimizer"
)

var (
	// ErrNotFound marks a path that holds no checkpoint: neither an index
	// nor a "latest" pointer. It also matches fs.ErrNotExist.
	ErrNotFound = errors.New("checkpoint: no checkpoint found")
	// ErrIncomplete marks a checkpoint directory without its index: a save
	// that did not finish (its staging directory) or files copied in part.
	ErrIncomplete = errors.New("checkpoint: incomplete checkpoint")
	// ErrMissingFile marks a shard file the index lists but that does not
	// exist.
	ErrMissingFile = errors.New("checkpoint: file missing")
	// ErrTruncated marks a file shorter than the index records.
	ErrTruncated = errors.New("checkpoint: file truncated")
	// ErrChecksum marks bytes whose checksum differs from the one recorded:
	// the index body, a file's header, a chunk of tensor data, a whole file.
	ErrChecksum = errors.New("checkpoint: checksum mismatch")
	// ErrCorrupt marks an index or shard file that is malformed although
	// its checksum matched (or that carries none): a format violation, an
	// inconsistent piece table, a tensor of the wrong type or length.
	ErrCorrupt = errors.New("checkpoint: malformed checkpoint")
	// ErrVersion marks a checkpoint written in a format version newer than
	// FormatVersion.
	ErrVersion = errors.New("checkpoint: format version newer than this reader")
	// ErrParamMissing marks a parameter of the optimizer absent from the
	// checkpoint, or (without LoadOptions.AllowUnused) one of the checkpoint
	// absent from the optimizer.
	ErrParamMissing = errors.New("checkpoint: parameter missing")
	// ErrShape marks a parameter saved with another shape.
	ErrShape = errors.New("checkpoint: parameter of another shape")
	// ErrRecipe marks a checkpoint saved under another FP8 recipe or with
	// other high-precision parameters, loaded without
	// LoadOptions.ConvertRecipe.
	ErrRecipe = errors.New("checkpoint: saved under a different FP8 recipe")
	// ErrMomentType marks moments saved in another type: float32 moments
	// into a bfloat16 optimizer (never converted), or bfloat16 moments into
	// a float32 optimizer without LoadOptions.WidenMoments.
	ErrMomentType = errors.New("checkpoint: saved with a different moment type")
	// ErrRule marks a checkpoint of another update rule (AdamW vs SGD).
	ErrRule = errors.New("checkpoint: saved with a different update rule")
	// ErrExists marks a save of the step that the "latest" pointer already
	// names: the newest complete checkpoint is never overwritten.
	ErrExists = errors.New("checkpoint: the latest checkpoint has this step")
	// ErrRewind marks a save of a step below the one root's "latest"
	// names, without SaveOptions.Rewind.
	ErrRewind = errors.New("checkpoint: the save would move latest backwards")
	// ErrDiverged marks ranks that hold different gathered parameters (or
	// read different indexes): before a save the state is not saved; after
	// a load the optimizer must not be used.
	ErrDiverged = errors.New("checkpoint: ranks disagree")
	// ErrVerify marks parameters that, recomputed after a load, differ from
	// those gathered when the checkpoint was saved (same recipe and types):
	// the optimizer must not be used.
	ErrVerify = errors.New("checkpoint: parameters after load differ from those saved")
	// ErrComm marks a communicator that does not match the optimizer (rank
	// count or memory kind).
	ErrComm = errors.New("checkpoint: communicator does not match the optimizer")
	// ErrRemote marks a failure that another rank reported with an error
	// none of the sentinels above describe (an I/O error, say).
	ErrRemote = errors.New("checkpoint: another rank failed")
	// ErrOptions marks invalid SaveOptions (a ChunkBytes out of range).
	ErrOptions = errors.New("checkpoint: invalid options")
)

// codes lists the errors that keep their identity when another rank reports
// them; a rank's error travels as the index of the first one it matches.
var codes = []error{
	ErrNotFound, ErrIncomplete, ErrMissingFile, ErrTruncated, ErrChecksum,
	ErrCorrupt, ErrVersion, ErrParamMissing, ErrShape, ErrRecipe,
	ErrMomentType, ErrRule, ErrExists, ErrDiverged, ErrVerify, ErrComm,
	optimizer.ErrBroken, context.Canceled, context.DeadlineExceeded, ErrRewind, ErrOptions,
}
