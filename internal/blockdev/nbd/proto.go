package nbd

// The NBD wire protocol: the subset this server speaks, named as in the
// spec (https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md).
// Every integer on the wire is big-endian.

const (
	magicInit     = 0x4e42444d41474943 // "NBDMAGIC", opens the greeting
	magicOpt      = 0x49484156454f5054 // "IHAVEOPT", the greeting and every option
	magicOptReply = 0x0003e889045565a9
	magicRequest  = 0x25609513
	magicReply    = 0x67446698 // a simple reply
)

// Handshake flags (server) and client flags.
const (
	flagFixedNewstyle = 1 << 0
	flagNoZeroes      = 1 << 1

	clientFixedNewstyle = 1 << 0
	clientNoZeroes      = 1 << 1
)

// Options, and the replies to them.
const (
	optExportName = 1
	optAbort      = 2
	optList       = 3
	optInfo       = 6
	optGo         = 7

	repAck    = 1
	repServer = 2
	repInfo   = 3

	repErrUnsup   = 1<<31 + 1
	repErrInvalid = 1<<31 + 3
	repErrUnknown = 1<<31 + 6
	repErrTooBig  = 1<<31 + 9
)

// Information types of NBD_OPT_INFO and NBD_OPT_GO.
const (
	infoExport    = 0
	infoName      = 1
	infoBlockSize = 3
)

// Transmission flags.
const (
	tflagHasFlags        = 1 << 0
	tflagSendFlush       = 1 << 2
	tflagSendFUA         = 1 << 3
	tflagSendTrim        = 1 << 5
	tflagSendWriteZeroes = 1 << 6
	tflagCanMultiConn    = 1 << 8

	// transmissionFlags is what every export offers. CAN_MULTI_CONN holds
	// because Device.Flush covers writes from every connection.
	transmissionFlags = tflagHasFlags | tflagSendFlush | tflagSendFUA |
		tflagSendTrim | tflagSendWriteZeroes | tflagCanMultiConn
)

// Commands and their flags.
const (
	cmdRead        = 0
	cmdWrite       = 1
	cmdDisc        = 2
	cmdFlush       = 3
	cmdTrim        = 4
	cmdWriteZeroes = 6

	cmdFlagFUA    = 1 << 0
	cmdFlagNoHole = 1 << 1
)

// Errors in replies: Linux errno values, whatever the server's OS.
const (
	errIO      = 5
	errInvalid = 22
	errNoSpace = 28
)

// Header sizes.
const (
	requestSize = 28 // magic, flags, type, handle, offset, length
	replySize   = 16 // magic, error, handle
)

// Block sizes advertised with NBD_INFO_BLOCK_SIZE. Any byte alignment is
// served (partial blocks of TRIM and WRITE_ZEROES are handled here), so the
// minimum is 1; maxPayload is also the limit on a READ or WRITE.
const (
	minBlock       = 1
	preferredBlock = 4096
	maxPayload     = 32 << 20
)
