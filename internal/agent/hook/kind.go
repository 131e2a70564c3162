package hook

// Kind says which hook a handler belongs to. The zero value means unknown.
type Kind int

const (
	PostStart Kind = iota + 1
	PreStop
)

func (k Kind) String() string {
	switch k {
	case PostStart:
		return "PostStart"
	case PreStop:
		return "PreStop"
	}
	return "Unknown"
}
